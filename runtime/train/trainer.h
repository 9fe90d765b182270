// Training: Poisson-sampled DP-SGD (or plain SGD) on this peer's shard, with one privacy plan
// (dp/privacy_plan.h) fixed before the first step, the accountant stepped once per step and one
// report per epoch. How the peers combine their privatised gradients and models is the
// algorithm's business (algorithm.h): single, allreduce, gossip, ... The trainer's step is the
// same for all of them.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <span>
#include <vector>

#include "dp/privacy_plan.h"
#include "runtime/collective/communicator.h"
#include "runtime/collective/device_collectives.h"
#include "runtime/core/trace.h"
#include "runtime/core/train_config.h"
#include "runtime/data/dataset.h"
#include "runtime/model/device_mlp.h"
#include "runtime/train/gossip.h"
#include "runtime/train/gradient.h"
#include "runtime/train/report.h"

namespace dpg::train {

struct RunState;  // the model, mechanism, optimiser, sampler, algorithm and accountant of one run
struct Progress;  // where a run stands at a step boundary (run_state.h)
class CheckpointDir;

class Trainer {
 public:
  // `comm` (null for one process) must outlive the trainer; every peer passes the same config.
  // `phases` are the graphs of the run for graph-based algorithms (gossip); the transport of
  // `comm` must connect every peer the algorithm talks to (algo_info(...).peers).
  // `tracer` (null or off: no timeline) records the step's spans and the epsilon spent.
  Trainer(TrainConfig config, data::Prepared data, collective::Communicator* comm = nullptr,
          std::vector<GossipPhase> phases = {}, trace::Tracer* tracer = nullptr);
  ~Trainer();
  // host_of[r]: rank r's host, for the hierarchical all-reduce (by default every rank is on a
  // host of its own). Set before run(), the same on every peer.
  void set_host_ids(std::vector<int> host_of) { host_of_ = std::move(host_of); }
  // Runs every step; calls on_epoch after each epoch's evaluation, and on_consensus every
  // metrics_every steps when the algorithm's replicas differ. With a checkpoint_dir it writes
  // checkpoints every checkpoint_every steps, and with resume it first continues from the
  // newest one every peer has (docs/RELIABILITY.md). When the stop flag is seen set at a stop
  // check (every peer agrees on the step), it writes a checkpoint there (with a
  // checkpoint_dir) and returns a summary with stopped_at set, without evaluating.
  TrainSummary run(const std::function<void(const EpochReport&)>& on_epoch,
                   const std::function<void(const ConsensusReport&)>& on_consensus = {});

  // Called with t before step t (tests slow one peer down, or make it fail mid-run, with it).
  // Set before run().
  void set_step_hook(std::function<void(long long t)> hook) { step_hook_ = std::move(hook); }
  // Called in step t with this peer's clipped sum just before the noise (gradient.h, SumHook):
  // what it adds is noised and released as the examples' share is. For the audit's gradient
  // canaries; not with an algorithm that streams its gradient. Set before run().
  void set_sum_hook(std::function<void(long long t, std::span<float> sum)> hook) {
    sum_hook_ = std::move(hook);
  }
  // With device cuda: makes the device model instead of the CUDA backend (tests run the
  // trainer's device path on the backend's host instance, model::make_host_thrust_mlp). Set
  // before run().
  using DeviceFactory = std::function<std::unique_ptr<model::DeviceMlp>(
      const model::MlpSpec& spec, std::span<const float> params)>;
  void set_device_factory(DeviceFactory f) { device_factory_ = std::move(f); }
  // With transport nccl: makes the collectives on the device's memory instead of NCCL (tests
  // pair the host instance with collective::HostMemoryCollectives). Collective, like NCCL's
  // set-up. Set before run().
  using DirectFactory =
      std::function<std::unique_ptr<collective::DeviceCollectives>(collective::Communicator&)>;
  void set_direct_factory(DirectFactory f) { direct_factory_ = std::move(f); }
  // A flag a signal handler sets (async-signal-safe: a lock-free atomic); read at each stop
  // check. Must outlive run().
  void set_stop_flag(const std::atomic<bool>* flag) { stop_flag_ = flag; }

  const TrainConfig& config() const { return config_; }
  const dp::PrivacyPlan& plan() const { return plan_; }
  // The split the run evaluates (config eval_split): test, or the held-out validation rows.
  const data::Dataset& eval_data() const {
    return config_.eval_split == EvalSplit::validation ? data_.validation : data_.test;
  }
  double sample_rate() const { return plan_.q; }
  long long total_steps() const { return plan_.steps; }
  double noise_multiplier() const { return plan_.sigma; }
  int rank() const { return comm_ ? comm_->rank() : 0; }
  int world() const { return comm_ ? comm_->world() : 1; }
  // This peer's model (its last iterate) once run() has returned; empty before.
  std::span<const float> params() const;
 private:
  struct EpochTotals {
    double loss_sum = 0;
    long long seen = 0, correct = 0;
  };
  // Sample, forward, backward with per-example norms, clip and noise, exchange and update,
  // account.
  void step(RunState& s, long long t, EpochTotals& totals, TrainSummary& summary) const;
  // The step's released gradient (sample, forward, backward, clip, noise) on the CPU, or on the
  // GPU of --device cuda.
  dp::PrivateGradient cpu_gradient(RunState& s, long long t, StepStats& stats) const;
  // On the device, the gradient comes to the host (through the staging buffers, in the CPU's
  // pieces when the algorithm streams them) only when the algorithm needs it there: else nullopt.
  std::optional<dp::PrivateGradient> device_gradient(RunState& s, long long t,
                                                     StepStats& stats) const;
  // Device-resident runs: the device's parameters and moving average (and with `momentum` its
  // momentum buffer) into the host's model and average (and optimiser) when they are behind; and
  // the host's state to the device (after the start's broadcast and a resume).
  void pull_model(RunState& s, bool momentum) const;
  void push_model(RunState& s) const;
  EpochReport evaluate_epoch(RunState& s, int epoch, long long t, const EpochTotals& totals) const;
  // The spread of the peers' models, and with `eval` the models on metrics_eval_rows test rows.
  ConsensusReport consensus(RunState& s, long long round, bool eval) const;
  // What the released model and one peer's messages have spent after `t` steps: the run's
  // accountants under DP (replayed steps included), else the plan's infinite epsilon.
  struct Spent {
    dp::PrivacySpent model;
    double messages = 0;
  };
  Spent spent(const RunState& s, long long t) const;
  // run() itself; run() poisons the transport when this throws (see there).
  TrainSummary run_steps(const std::function<void(const EpochReport&)>& on_epoch,
                         const std::function<void(const ConsensusReport&)>& on_consensus);
  void log_start() const;
  // The run's privacy plan: the noise multiplier calibrated by rank 0 and checked by the others
  // (collective), or computed by each peer where nothing is searched for.
  dp::PrivacyPlan agreed_plan(const dp::PlanInputs& in) const;
  // The last step of `epoch` (1-based; 0 gives 0).
  long long epoch_end(int epoch) const;

  // Checkpoints (trainer_checkpoint.cc). Opens the folder; with resume, agrees with the other
  // peers on the step to continue from, restores it and charges the accountants for any steps
  // taken past it that will not be repeated exactly. Returns where the run starts.
  Progress start_checkpoints(RunState& s, TrainSummary& summary);
  // At the boundary before step p.step: the stop check and the checkpoint when due. Returns
  // whether every peer stops here.
  bool at_boundary(RunState& s, const Progress& p, bool epoch_start);
  void write_checkpoint(RunState& s, const Progress& p, bool stopping);
  // The newest step that every peer has in `mine` (ascending), or -1 when there is none;
  // `newest` lists each peer's newest, `any` says whether some peer has one.
  long long agree_on_step(const std::vector<long long>& mine, std::string& newest,
                          bool& any) const;
  // The highest step the ledger may say this peer reached from boundary t.
  long long reservation_from(long long t) const;

  TrainConfig config_;
  data::Prepared data_;
  collective::Communicator* comm_;
  std::vector<GossipPhase> phases_;
  std::vector<int> host_of_;  // rank r's host (set_host_ids); empty: one host per rank
  trace::Tracer* tracer_;
  double total_rows_ = 0;
  dp::PrivacyPlan plan_;
  std::unique_ptr<RunState> state_;  // kept after run() for params()
  std::function<void(long long t)> step_hook_;
  std::function<void(long long t, std::span<float> sum)> sum_hook_;
  const std::atomic<bool>* stop_flag_ = nullptr;
  DeviceFactory device_factory_;
  DirectFactory direct_factory_;
  std::unique_ptr<CheckpointDir> checkpoints_;
  long long start_step_ = 0;       // where this run began (0, or the step it resumed from)
  long long reserved_floor_ = 0;   // steps an abandoned continuation reached that a replay repeats
  long long stop_check_every_ = 0;  // 0: only at epoch starts and checkpoints
};

}  // namespace dpg::train
