// A run set up in one place. apps/ (or a test) hands in what it chose outside runtime/train:
// the data, the communicator over the transport it picked, the graphs, the tracer and the
// backends of --device cuda and --transport nccl; this file checks the combination against the
// algorithm table once (check_run), fixes the privacy plan (plan_run) and builds the run's state
// (build_state: the model on its device, the collectives on its memory, the evaluator, the
// algorithm). The Trainer (trainer.h) only runs what was built.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "dp/privacy_plan.h"
#include "runtime/collective/communicator.h"
#include "runtime/collective/device_collectives.h"
#include "runtime/core/trace.h"
#include "runtime/core/train_config.h"
#include "runtime/data/dataset.h"
#include "runtime/model/device_mlp.h"
#include "runtime/train/algorithm.h"
#include "runtime/train/gossip.h"
#include "runtime/train/straggler.h"

namespace dpg::train {

struct RunState;

// The backends apps/ chose, as it chooses the transport: runtime/train includes no CUDA or
// NCCL header and picks no GPU.
struct Backends {
  // With device cuda: the model on the GPU, at `params` (apps/: the CUDA backend on the GPU the
  // device names, or rank % count; tests: the backend's host instance). Null: a run on a GPU is
  // refused.
  using DeviceFactory = std::function<std::unique_ptr<model::DeviceMlp>(
      const model::MlpSpec& spec, std::span<const float> params, int rank)>;
  DeviceFactory device;
  // With transport nccl: the collectives on the device model's memory, set up collectively over
  // `comm` (apps/: NCCL; tests: collective::HostMemoryCollectives). Null: nccl is refused.
  using DirectFactory =
      std::function<std::unique_ptr<collective::DeviceCollectives>(collective::Communicator& comm)>;
  DirectFactory direct;
};

// Callbacks into the run, for the audit and the tests.
struct RunHooks {
  // Before step t, with this peer's model as it stands (tests slow a peer down or make it fail
  // mid-run; the audit reads its canaries' starting values).
  std::function<void(long long t, std::span<const float> params)> step;
  // In step t with this peer's clipped sum just before the noise (gradient.h, SumHook): what it
  // adds is noised and released as the examples' share is. The audit's gradient canaries; not
  // with an algorithm that streams its gradient, nor on a GPU.
  std::function<void(long long t, std::span<float> sum)> sum;
  // Set by a signal handler (a lock-free atomic), read at each stop check; outlives the run.
  const std::atomic<bool>* stop = nullptr;
  // Collective, at the start of every epoch after the first (step: its first step): this
  // peer's new training rows from a load balancer (--balance-every), or nothing to keep them.
  // The rows' sampling rate and the mechanism's denominator stay the plan's.
  std::function<std::optional<data::Dataset>(int epoch, long long step)> rebalance;
  // Collective, at the same epoch starts, for rows that stay with their peers: every peer's new
  // sampling rate (the same vector on every peer, each at most RunInputs::rate_cap), or nothing
  // to keep them. The mechanism's denominator stays the plan's.
  std::function<std::optional<std::vector<double>>(int epoch, long long step)> rerate;
};

// Every peer's sampling rate (rank order) from step `from` on.
struct RatesFrom {
  long long from = 0;
  std::vector<double> peer_q;
};

// Everything a run is built from. The communicator (null for one process) and the tracer (null
// or off: no timeline) outlive the trainer; every peer passes the same config.
struct RunInputs {
  TrainConfig config;
  data::Prepared data;
  collective::Communicator* comm = nullptr;
  // The graphs of a graph-based algorithm; the transport of `comm` connects every peer the
  // algorithm talks to (algo_info(...).peers).
  std::vector<GossipPhase> phases;
  // host_of[r]: rank r's host, for the hierarchical all-reduce; empty: a host per rank.
  std::vector<int> host_of;
  trace::Tracer* tracer = nullptr;
  // Emulated slow peers (--slowdown, every peer's entries; each applies its own): straggler.h.
  std::vector<Slowdown> slowdown;
  // Each peer's share of the batch from --balance speed (balance.h), in rank order; empty: even.
  std::vector<double> peer_share;
  // The highest sampling rate hooks.rerate may give a peer (PlanInputs::rate_cap); 0: none.
  double rate_cap = 0;
  Backends backends;
  RunHooks hooks;
  // Whether this peer's epoch and consensus lines and its summary are read (the app reads rank
  // 0's alone). A peer whose lines nobody reads leaves their epsilons out (NaN), and its
  // summary's too unless its ledger records them (checkpoint_dir): each is an accountant's
  // figure, made every metrics_every steps, that takes milliseconds and, with PLD, megabytes
  // of transforms.
  bool reports_read = true;
};

// The one validation of a run's combination of settings, algorithm, backends, hooks and data
// against the algorithm table's columns (what each algorithm allows); throws invalid_argument
// naming the field.
void check_run(const RunInputs& in);

// The split the run evaluates (config eval_split): test, or the held-out validation rows.
const data::Dataset& eval_split(const RunInputs& in);

// The run's privacy plan from public facts: every peer's shard size (all-reduced), the batch,
// the epochs, the target. The noise multiplier is calibrated by rank 0 and checked by the
// others (collective), or computed by each peer where nothing is searched for.
dp::PrivacyPlan plan_run(const RunInputs& in);

// The run's state at step 0, collectively on every peer: the model (on the GPU of --device
// cuda, with the collectives on its memory for --transport nccl), the same initial model on
// every peer (init same), the evaluator and the algorithm.
std::unique_ptr<RunState> build_state(const RunInputs& in, const dp::PrivacyPlan& plan);

}  // namespace dpg::train
