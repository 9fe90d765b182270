// The state of one peer's training run (what the Trainer holds between steps), and what a
// checkpoint keeps of it (docs/RELIABILITY.md): the model, the optimiser's momentum, the
// parameter average, the accountants, the run's progress, and, when the noise seed is fixed,
// the sampler's and the noise's generators. The algorithm adds its own (Algorithm::save).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "dp/accountant.h"
#include "dp/mechanism.h"
#include "dp/privacy_plan.h"
#include "runtime/core/train_config.h"
#include "runtime/data/dataset.h"
#include "runtime/collective/device_collectives.h"
#include "runtime/model/device_mlp.h"
#include "runtime/model/mlp.h"
#include "runtime/train/algorithm.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/gradient.h"
#include "runtime/train/optimizer.h"
#include "runtime/train/report.h"
#include "runtime/train/run_setup.h"
#include "runtime/train/sampler.h"
#include "runtime/train/straggler.h"

namespace dpg::train {

// A 64-bit seed from the OS (getrandom(2)), never 0: the secret noise and sampler seed.
std::uint64_t secret_seed();
// The MLP of config `c` for data shaped like `d`.
model::MlpSpec spec_for(const TrainConfig& c, const data::Dataset& d);

// Virtual batches: the most rows one forward and backward pass holds (0: the whole batch), from
// physical_batch and batch_memory_mib (the most rows whose buffers, the model's workspace and the
// clipping's per-example scratch with the workspace's headroom, fit in it; the smaller of the
// two). check_run refuses a cap that holds no row.
std::size_t physical_rows(const TrainConfig& c, const model::MlpSpec& spec);
// The bytes a row of a pass takes (the workspace's with its headroom, and the clipping's).
double pass_row_bytes(const model::MlpSpec& spec);

struct RunState {
  RunState(const TrainConfig& c, const data::Dataset& train, const dp::PrivacyPlan& plan,
           int rank);

  model::MlpSpec spec;
  model::Mlp model;
  model::Mlp released;  // what is evaluated and reported: the iterate or its average
  model::Workspace ws, eval_ws;
  std::uint64_t noise_seed;
  dp::GaussianMechanism mechanism;
  Sgd sgd;
  std::optional<ParamAverage> ema;
  std::unique_ptr<Algorithm> algorithm;
  dp::Accountant accountant;          // the released model, for the worst peer's data
  dp::Accountant message_accountant;  // the worst peer's messages
  std::size_t pass_rows = 0;  // virtual batches: the most rows a pass holds (0: the batch)
  std::optional<PoissonSampler> poisson;
  std::optional<ShuffleSampler> shuffle;
  std::vector<std::int32_t> labels;
  StepBuffers buffers;
  double lr = 0;
  std::vector<float> scratch;  // the mean of the peers' models
  std::optional<ConsensusReport> last_consensus;  // the latest K-step report
  std::optional<Evaluator> evaluator;
  // With --device cuda: the model on the GPU, the training rows resident there, and the step's
  // row indices for it. With `resident` (the algorithm updates on the device) the parameters,
  // momentum and moving average live there, and `model`, `sgd` and `ema` are their copies,
  // current only when host_current says so (Trainer::pull_model); otherwise the host model is the
  // algorithm's and goes to the device before each step.
  std::unique_ptr<model::DeviceMlp> device;
  std::vector<std::uint32_t> device_rows;
  bool resident = false;
  bool host_current = true;
  // With --transport nccl: collectives on the device's memory.
  std::unique_ptr<collective::DeviceCollectives> direct;
  // The run's communicator while its float all-reduces go to `direct` (host_route): the route is
  // removed when the run's state goes, before `direct` (declared after it, so destroyed first),
  // so that no later all-reduce of that communicator reaches a destroyed NCCL communicator.
  struct FloatRoute {
    collective::Communicator* comm = nullptr;
    FloatRoute() = default;
    FloatRoute(const FloatRoute&) = delete;
    FloatRoute& operator=(const FloatRoute&) = delete;
    ~FloatRoute() {
      if (comm != nullptr) comm->route_float_allreduce({});
    }
  } float_route;
  std::chrono::steady_clock::time_point start;
  std::optional<Straggler> straggler;  // with --slowdown entries for this peer
  // Every peer's sampling rate now (the plan's, until a balancer changes them: RunHooks::rerate),
  // and from which step each set of rates held, for each peer's own account at the end.
  std::vector<RatesFrom> rates;
};

// Where a run stands at a step boundary, besides the state above.
struct Progress {
  long long step = 0;                // steps taken
  double loss_sum = 0;               // the current epoch's batches so far
  long long seen = 0, correct = 0;
  long long dropped = 0;             // the run's dropped examples
  long long epoch_dropped_before = 0;  // the run's, when the current epoch began
  long long skipped = 0;             // the run's batches skipped (every example non-finite)
  long long epoch_skipped_before = 0;
  long long samples = 0;             // counted for the throughput, over finished epochs
  double train_seconds = 0;          // training time so far, evaluation excluded
  double wall_seconds = 0;           // since the run began (resumes included)
};

// What a checkpoint must match to be resumed by this run.
struct RunIdentity {
  const TrainConfig& config;
  const dp::PrivacyPlan& plan;
  int rank = 0, world = 1;
  std::size_t shard_rows = 0;
  // Drawn by rank 0 when a run with checkpoints starts, kept by its resumes: every checkpoint and
  // ledger carries it, so a file of another run with the same settings is not taken for its own.
  std::string run_id;
};

// The checkpoint of the state at boundary p.step (the algorithm's part not included).
Checkpoint save_run_state(const RunState& s, const Progress& p, const RunIdentity& id);
// Throws invalid_argument naming the file and what differs when `c` was written by another
// run: another training setting (the field), noise seed, plan, world or shard.
void check_same_run(const Checkpoint& c, const RunIdentity& id);
// What differs between training settings `theirs` (training_settings() of an earlier run) and
// `c`'s: "/lr was 1.0, is 0.5, ...".
std::string settings_difference(const Json& theirs, const TrainConfig& c);
// Restores the model, momentum, average, accountants and progress of `c`; the sampler's and
// the noise's generators too when the noise seed is fixed (a secret one is drawn anew).
Progress restore_run_state(RunState& s, const Checkpoint& c, const RunIdentity& id);

}  // namespace dpg::train
