// What a training run reports: one line per epoch, the consensus lines of algorithms whose
// replicas differ, and the summary at the end; as JSON for the metrics file and as the
// human-readable progress line. Epsilons come from the run's privacy plan (dp/privacy_plan.h).
#pragma once

#include <string>
#include <vector>

#include "dp/privacy_plan.h"
#include "runtime/core/json_io.h"
#include "runtime/core/train_config.h"

namespace dpg::train {

struct EpochReport {
  int epoch = 0;
  long long step = 0;
  double wall_s = 0;             // since the start of training
  // Training loss and accuracy: this (the reporting) peer's own batches, before noise; not
  // covered by epsilon. In the JSON (marked "train_metrics": "unprotected") and the progress line
  // only with report_train.
  bool report_train = false;
  double loss = 0;               // mean per-example training loss over the epoch's batches
  double train_accuracy = 0;     // over the epoch's batches, before each update
  // Of the released model (the parameter average when on) on `split`: "test", or "validation"
  // (then the JSON keys say validation_* instead of test_*).
  std::string split = "test";
  double test_accuracy = 0;
  double test_loss = 0;
  double epsilon = 0;            // the released model's, spent so far (infinite when DP is off)
  double message_epsilon = 0;    // one peer's messages', spent so far
  double samples_per_second = 0; // training throughput, evaluation excluded (0: too short to time)
  // This epoch's examples dropped for a non-finite feature or gradient, and batches skipped since
  // all of theirs were: in the JSON and the progress line only with report_dropped (they depend
  // on the private data, and no noise covers them).
  bool report_dropped = false;
  long long dropped_examples = 0;
  long long skipped_batches = 0;
  double lr = 0;
  // When the replicas differ (replicas_differ()): their spread and each peer's own model on the
  // test split (consensus_distance < 0 and the lists empty otherwise).
  double consensus_distance = -1;
  std::vector<double> peer_test_accuracy, peer_test_loss;
  Json extra = Json::object();   // the algorithm's own fields (gossip: topology, rho)
  Json to_json() const;
};

// The consensus distance every `metrics_every` steps, when the replicas differ.
struct ConsensusReport {
  long long round = 0;      // steps taken
  double epoch = 0;         // round * q
  double wall_s = 0;
  double consensus_distance = 0;
  double epsilon = 0, message_epsilon = 0;  // spent after `round` steps (infinite without DP)
  std::string split = "test";               // what test_* below evaluated
  // With metrics_eval_rows > 0: the peers' mean model (test_*) and each peer's own iterate
  // (peer_test_*) on the first eval_rows test rows.
  long long eval_rows = 0;
  double test_accuracy = 0, test_loss = 0;
  std::vector<double> peer_test_accuracy, peer_test_loss;
  Json extra = Json::object();
  Json to_json() const;
};

struct TrainSummary {
  double test_accuracy = 0;
  double test_accuracy_last_iterate = 0;
  double epsilon = 0;            // of the released model, for the worst peer's data
  double message_epsilon = 0;    // of the worst peer's messages, against one who sees only those
  double best_alpha = 0;
  std::vector<double> peer_epsilons;  // each peer's, when peers sample at their own rates
  int peers = 1;
  long long steps = 0;
  double samples_per_second = 0;
  double wall_s = 0;
  long long dropped_examples = 0;  // reported with config.report_dropped only
  long long skipped_batches = 0;
  std::vector<double> peer_test_accuracy;  // when the replicas differ: each peer's own model
  Json accountant;               // the accountant's state, for a checkpoint
  // Checkpoints (docs/RELIABILITY.md): the step this run resumed from (-1: it started afresh),
  // the step where a signal stopped it (-1: it ran to the end; then nothing was evaluated), and
  // the steps of abandoned continuations that the accountants charged again at the resume.
  long long resumed_from = -1;
  long long stopped_at = -1;
  long long replay_charged_steps = 0;
  bool evaluated = false;  // an epoch was evaluated (a run stopped in its first epoch had none)
  // A --resume of a run that had finished (every peer's ledger says so): nothing ran, and
  // `epsilon` is what that run reported.
  bool already_finished = false;
  Json extra = Json::object();   // the algorithm's own fields
  // A stopped run reports what ran: `steps` taken (the plan's in `planned_steps`), the last
  // evaluated epoch's accuracy (null if none was), and no last-iterate accuracy (none is taken).
  Json to_json(const TrainConfig& config, const dp::PrivacyPlan& plan) const;
};

// Samples per second, or 0 when `seconds` is too short for the figure to mean anything.
inline constexpr double kMinTimedSeconds = 1e-3;
inline double throughput(double samples, double seconds) {
  return seconds >= kMinTimedSeconds ? samples / seconds : 0.0;
}
// "1234 samples/s", or "too short to time" when throughput() gave 0.
std::string throughput_text(double samples_per_second);

// Prints a report as one human-readable progress line.
std::string progress_line(const EpochReport& r, int total_epochs);

}  // namespace dpg::train
