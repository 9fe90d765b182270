// Training: Poisson-sampled DP-SGD (or plain SGD) on this peer's shard, with one privacy plan
// (dp/privacy_plan.h) fixed before the first step, the accountant stepped once per step and one
// report per epoch. How the peers combine their privatised gradients and models is the
// algorithm's business (algorithm.h): single, allreduce, gossip, ... The trainer's step is the
// same for all of them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <span>
#include <vector>

#include "dp/privacy_plan.h"
#include "runtime/collective/communicator.h"
#include "runtime/core/trace.h"
#include "runtime/core/train_config.h"
#include "runtime/data/dataset.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/consensus_poll.h"
#include "runtime/train/gossip.h"
#include "runtime/train/gradient.h"
#include "runtime/train/report.h"
#include "runtime/train/run_setup.h"

namespace dpg::train {

struct RunState;  // the model, mechanism, optimiser, sampler, algorithm and accountant of one run
struct Progress;  // where a run stands at a step boundary (run_state.h)

class Trainer {
 public:
  // Checks the run (check_run) and fixes its privacy plan (plan_run; collective: every peer
  // constructs its trainer at the same point).
  explicit Trainer(RunInputs in);
  // A run without backends or hooks (tests, one process).
  Trainer(TrainConfig config, data::Prepared data, collective::Communicator* comm = nullptr,
          std::vector<GossipPhase> phases = {}, trace::Tracer* tracer = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Builds the run's state (build_state) and runs every step; calls on_epoch after each
  // epoch's evaluation, and on_consensus every metrics_every steps when the algorithm's
  // replicas differ. With a checkpoint_dir it writes checkpoints every checkpoint_every steps,
  // and with resume it first continues from the newest one every peer has
  // (docs/RELIABILITY.md). When the stop flag is seen set at a stop check (every peer agrees on
  // the step), it writes a checkpoint there (with a checkpoint_dir) and returns a summary with
  // stopped_at set, without evaluating.
  TrainSummary run(const std::function<void(const EpochReport&)>& on_epoch,
                   const std::function<void(const ConsensusReport&)>& on_consensus = {});

  const TrainConfig& config() const { return in_.config; }
  const dp::PrivacyPlan& plan() const { return plan_; }
  // The split the run evaluates (config eval_split): test, or the held-out validation rows.
  const data::Dataset& eval_data() const { return eval_split(in_); }
  double sample_rate() const { return plan_.q; }
  long long total_steps() const { return plan_.steps; }
  double noise_multiplier() const { return plan_.sigma; }
  int rank() const { return in_.comm ? in_.comm->rank() : 0; }
  int world() const { return in_.comm ? in_.comm->world() : 1; }
  // This peer's model: its last iterate once run() has returned, its current one in a step
  // hook; empty before run().
  std::span<const float> params() const;

 private:
  struct EpochTotals {
    double loss_sum = 0;
    long long seen = 0, correct = 0;
  };
  struct Loop;  // where the loop stands (trainer.cc)

  // The loop: start (build, resume, the first report), each epoch's steps and report, finish
  // (the summary). run() poisons the transport when one of them throws.
  TrainSummary run_steps(const std::function<void(const EpochReport&)>& on_epoch,
                         const std::function<void(const ConsensusReport&)>& on_consensus);
  void start(Loop& loop);
  // Steps to the end of `epoch` (or to a stop); returns false when the run stopped.
  bool run_epoch(Loop& loop, int epoch);
  void report_epoch(Loop& loop, int epoch);
  TrainSummary finish(Loop& loop);
  // The consensus distance every metrics_every steps, when the replicas differ: a meeting of
  // the peers (consensus()), or for an asynchronous algorithm rank 0's poll of their models
  // (consensus_poll.h), which no peer waits for.
  void report_consensus(Loop& loop, long long round);
  // Before a wait away from the steps (an epoch's end, the algorithm's finish()): the poll
  // answers with this peer's model after `step` steps meanwhile.
  void park_poll(long long step);
  // The poll's end, after the algorithm's finish(): its last report, if one is in flight.
  void close_poll(Loop& loop);

  // Sample, forward, backward with per-example norms, clip and noise, exchange and update,
  // account (trainer_step.cc).
  void step(RunState& s, long long t, EpochTotals& totals, TrainSummary& summary) const;
  // The step's released gradient (sample, forward, backward, clip, noise) on the CPU, or on the
  // GPU of --device cuda.
  dp::PrivateGradient cpu_gradient(RunState& s, long long t, StepStats& stats) const;
  // On the device, the gradient comes to the host (through the staging buffers, in the CPU's
  // pieces when the algorithm streams them) only when the algorithm needs it there: else nullopt.
  std::optional<dp::PrivateGradient> device_gradient(RunState& s, long long t,
                                                     StepStats& stats) const;
  // This peer's training rows from now on (a rebalance): the data and the sampler over it, at
  // the plan's rate; the sampler's generator goes on.
  void take_rows(RunState& s, data::Dataset rows);
  // Every peer's sampling rate from `step` on (a balancer over rows that stay: RunHooks::rerate):
  // this peer's sampler goes on at its new rate, and the run's accounts are charged from then on
  // at the highest.
  void take_rates(RunState& s, std::vector<double> rates, long long step);
  // This peer's sampler over its rows at its current rate, its generator going on.
  void resample(RunState& s);
  // Each peer's epsilon for its data in the model after `t` steps, from the rates it had.
  std::vector<double> peer_epsilons_of(const std::vector<RatesFrom>& rates, long long t) const;
  // --slowdown: pauses as long as the emulated slow peer's extra compute for step t, whose
  // gradient was computed from `worked_from` to now (straggler.h).
  void stretch(RunState& s, long long t, std::chrono::steady_clock::time_point worked_from) const;
  // Device-resident runs: the device's parameters and moving average (and with `momentum` its
  // momentum buffer) into the host's model and average (and optimiser) when they are behind; and
  // the host's state to the device (after the start's broadcast and a resume).
  void pull_model(RunState& s, bool momentum) const;
  void push_model(RunState& s) const;

  EpochReport evaluate_epoch(RunState& s, int epoch, long long t, const EpochTotals& totals) const;
  // A consensus line's fields known without the other peers: round, epoch, the epsilons spent,
  // the split and the algorithm's annotations.
  ConsensusReport consensus_head(const RunState& s, long long round) const;
  // The spread of the peers' models, and with `eval` the models on metrics_eval_rows test rows.
  ConsensusReport consensus(RunState& s, long long round, bool eval) const;
  // What the released model and one peer's messages have spent after `t` steps: the run's
  // accountants under DP (replayed steps included), else the plan's infinite epsilon.
  struct Spent {
    dp::PrivacySpent model;
    double messages = 0;
  };
  Spent spent(const RunState& s, long long t) const;
  // spent() for an epoch or consensus line, or NaN where nobody reads this peer's lines
  // (RunInputs::reports_read).
  Spent reported_spent(const RunState& s, long long t) const;
  void log_start() const;
  // The last step of `epoch` (1-based; 0 gives 0).
  long long epoch_end(int epoch) const;

  // Checkpoints (trainer_checkpoint.cc). Opens the folder; with resume, agrees with the other
  // peers on the step to continue from, restores it and charges the accountants for any steps
  // taken past it that will not be repeated exactly. Returns where the run starts.
  Progress start_checkpoints(RunState& s, TrainSummary& summary);
  // Collective, before the run state is built: whether this is a --resume of a run whose every
  // peer's ledger says it took all its steps (then nothing is trained again). Throws naming the
  // ledger when it says so for another run's settings. This peer's record when they all are.
  std::optional<CheckpointDir::Finished> finished_before() const;
  // Collective, first of all when the run has a checkpoint_dir: the run id (RunIdentity) that
  // every peer's ledger carries at a --resume (throws naming the peers whose folders belong to
  // another run), else a new one drawn by rank 0.
  void settle_run_id();
  // Collective, at a resume of an algorithm whose peers hold one model: throws data_loss naming
  // the peers whose restored model differs from rank 0's.
  void check_same_model(const RunState& s, long long step) const;
  // At the end of a run that took all its steps: its ledger says so.
  void mark_finished(const TrainSummary& summary) const;
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

  RunInputs in_;
  dp::PrivacyPlan plan_;
  // An asynchronous algorithm's K-step reports, from start() to the loop's end; reset after
  // the transport is poisoned when the run fails, so that its threads do not wait out a timeout.
  std::unique_ptr<ConsensusPoll> poll_;
  std::unique_ptr<RunState> state_;  // kept after run() for params()
  std::unique_ptr<CheckpointDir> checkpoints_;
  long long start_step_ = 0;       // where this run began (0, or the step it resumed from)
  std::string run_id_;             // settle_run_id()'s (with a checkpoint_dir)
  long long reserved_floor_ = 0;   // steps an abandoned continuation reached that a replay repeats
  long long stop_check_every_ = 0;  // 0: only at epoch starts and checkpoints
};

}  // namespace dpg::train
