// Training: Poisson-sampled DP-SGD (or plain SGD) on this peer's shard, with the privacy
// accountant stepped once per step and one report per epoch. With a communicator it is
// synchronous data-parallel DP-SGD: every peer noises its own clipped sum before the ring
// all-reduce, and every replica takes the same update in lockstep. With --algo gossip it is
// D-PSGD: every peer keeps its own model, noises its own gradient with the full sigma, and mixes
// its model with its neighbours' in the topology while the gradient is being computed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/collective/communicator.h"
#include "runtime/core/json_io.h"
#include "runtime/core/train_config.h"
#include "runtime/data/dataset.h"
#include "runtime/model/mlp.h"
#include "runtime/train/gossip.h"

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
  // gossip only (topology empty otherwise): the graph in force, the spread of the peers' models
  // and each peer's own (averaged-iterate) model on the test split.
  std::string topology;
  double rho = 0;
  double consensus_distance = 0;
  std::vector<double> peer_test_accuracy, peer_test_loss;
  Json to_json() const;
};

// gossip: the consensus distance every `metrics_every` rounds.
struct ConsensusReport {
  long long round = 0;      // rounds of mixing done (= steps)
  double epoch = 0;         // round * q
  double wall_s = 0;
  double consensus_distance = 0;
  std::string topology;
  double rho = 0;
  // With metrics_eval_rows > 0: the peers' mean model (test_*) and each peer's own iterate
  // (peer_test_*) on the first eval_rows test rows.
  long long eval_rows = 0;
  double test_accuracy = 0, test_loss = 0;
  std::vector<double> peer_test_accuracy, peer_test_loss;
  Json to_json() const;
};

struct TrainSummary {
  double test_accuracy = 0;
  double test_accuracy_last_iterate = 0;
  double epsilon = 0;            // of the released model
  double message_epsilon = 0;    // of any one peer's messages, against one who sees only those
  double best_alpha = 0;
  std::vector<double> peer_epsilons;  // gossip: each peer's, from its own sampling rate
  double noise_multiplier = 0;   // of the sum: the released model's guarantee
  double peer_noise_multiplier = 0;  // what each peer adds to its own gradient
  int peers = 1;
  double sample_rate = 0;
  long long steps = 0;
  double samples_per_second = 0;
  double wall_s = 0;
  long long dropped_examples = 0;
  std::string topology;          // gossip: the last graph in force; else the algorithm
  double rho = 0, spectral_gap = 1;
  std::vector<double> peer_test_accuracy;  // gossip: each peer's own model at the end
  Json accountant;               // the accountant's state, for a checkpoint
  Json to_json(const TrainConfig& config) const;
};

struct RunState;  // the model, mechanism, optimiser, sampler and accountant of one run

class Trainer {
 public:
  // `comm` (null for one process) must outlive the trainer; every peer passes the same config.
  // gossip (config.algo) takes the graphs of the run; the transport of `comm` must connect every
  // neighbour of this peer in them.
  Trainer(TrainConfig config, data::Prepared data, collective::Communicator* comm = nullptr,
          std::vector<GossipPhase> gossip = {});
  // Runs every step; calls on_epoch after each epoch's evaluation, and on_consensus (gossip)
  // every metrics_every rounds.
  TrainSummary run(const std::function<void(const EpochReport&)>& on_epoch,
                   const std::function<void(const ConsensusReport&)>& on_consensus = {});

  const TrainConfig& config() const { return config_; }
  double sample_rate() const { return q_; }
  double local_sample_rate() const { return q_local_; }
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
  // gossip: `own` (this peer's model) on the first `rows` test rows, gathered on every peer as
  // (accuracy, loss) lists. Uses s.released as its scratch model.
  void evaluate_peers(RunState& s, std::span<const float> own, std::size_t rows,
                      std::vector<double>& accuracy, std::vector<double>& loss) const;
  // gossip: the consensus distance, and with `eval` the K-step evaluation of the models.
  ConsensusReport consensus(RunState& s, long long round, bool eval) const;
  // The released model of the run into s.released: this peer's (averaged) iterate, or for gossip
  // the mean of every peer's.
  void release(RunState& s, std::span<const float> mine) const;
  bool gossiping() const { return config_.algo == Algo::gossip && comm_ != nullptr; }

  // Sums values over the peers in place (nothing to do alone).
  void sum_over_peers(std::span<double> values) const;
  // On the first `rows` test rows (all by default), each peer taking a slice.
  model::Mlp::Evaluation evaluate_shared(const model::Mlp& m, model::Workspace& ws,
                                         std::size_t rows = SIZE_MAX) const;

  TrainConfig config_;
  data::Prepared data_;
  collective::Communicator* comm_;
  double total_rows_ = 0;
  double model_sigma_ = 0, peer_sigma_ = 0;
  double q_ = 0;            // batch_size / all rows: the steps of an epoch
  double q_local_ = 0;      // this peer's sampling rate
  double local_batch_ = 0;  // this peer's expected batch, the mechanism's denominator
  std::vector<double> peer_q_;  // every peer's sampling rate (gossip), for its epsilon
  std::vector<GossipPhase> gossip_phases_;
  long long total_steps_ = 0;
  double sigma_ = 0;
};

// Prints a report as one human-readable progress line.
std::string progress_line(const EpochReport& r, int total_epochs);

}  // namespace dpg::train
