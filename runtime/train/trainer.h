// Training: Poisson-sampled DP-SGD (or plain SGD) on this peer's shard, with the privacy
// accountant stepped once per step and one report per epoch. With a communicator it is
// synchronous data-parallel DP-SGD: every peer noises its own clipped sum before the ring
// all-reduce, and every replica takes the same update in lockstep.
#pragma once

#include <functional>
#include <string>

#include "runtime/collective/communicator.h"
#include "runtime/core/json_io.h"
#include "runtime/core/train_config.h"
#include "runtime/data/dataset.h"
#include "runtime/model/mlp.h"

namespace dpg::train {

struct EpochReport {
  int epoch = 0;
  long long step = 0;
  double wall_s = 0;             // since the start of training
  double loss = 0;               // mean per-example training loss over the epoch's batches
  double train_accuracy = 0;     // over the epoch's batches, before each update
  double test_accuracy = 0;      // of the released model (the parameter average when on)
  double test_loss = 0;
  double epsilon = 0;            // spent so far (infinite when DP is off)
  double samples_per_second = 0; // training throughput, evaluation excluded
  double lr = 0;
  Json to_json() const;
};

struct TrainSummary {
  double test_accuracy = 0;
  double test_accuracy_last_iterate = 0;
  double epsilon = 0;            // of the released model
  double message_epsilon = 0;    // of any one peer's messages, against one who sees only those
  double best_alpha = 0;
  double noise_multiplier = 0;   // of the sum: the released model's guarantee
  double peer_noise_multiplier = 0;  // what each peer adds to its own gradient
  int peers = 1;
  double sample_rate = 0;
  long long steps = 0;
  double samples_per_second = 0;
  double wall_s = 0;
  long long dropped_examples = 0;
  Json accountant;               // the accountant's state, for a checkpoint
  Json to_json(const TrainConfig& config) const;
};

struct RunState;  // the model, mechanism, optimiser, sampler and accountant of one run

class Trainer {
 public:
  // `comm` (null for one process) must outlive the trainer; every peer passes the same config.
  Trainer(TrainConfig config, data::Prepared data, collective::Communicator* comm = nullptr);
  // Runs every step; calls on_epoch after each epoch's evaluation.
  TrainSummary run(const std::function<void(const EpochReport&)>& on_epoch);

  const TrainConfig& config() const { return config_; }
  double sample_rate() const { return q_; }
  long long total_steps() const { return total_steps_; }
  double noise_multiplier() const { return sigma_; }
  int rank() const { return comm_ ? comm_->rank() : 0; }
  int world() const { return comm_ ? comm_->world() : 1; }

 private:
  struct EpochTotals {
    double loss_sum = 0;
    long long seen = 0, correct = 0;
  };
  // One step: sample, gather, forward and backward with per-example norms, clip and noise,
  // update, average, account.
  void step(RunState& s, long long t, EpochTotals& totals, TrainSummary& summary) const;
  EpochReport evaluate_epoch(RunState& s, int epoch, long long t, const EpochTotals& totals) const;

  // Sums values over the peers in place (nothing to do alone).
  void sum_over_peers(std::span<double> values) const;
  model::Mlp::Evaluation evaluate_shared(const model::Mlp& m, model::Workspace& ws) const;

  TrainConfig config_;
  data::Prepared data_;
  collective::Communicator* comm_;
  double total_rows_ = 0;
  double model_sigma_ = 0, peer_sigma_ = 0;
  double q_ = 0;
  long long total_steps_ = 0;
  double sigma_ = 0;
};

// Prints a report as one human-readable progress line.
std::string progress_line(const EpochReport& r, int total_epochs);

}  // namespace dpg::train
