#include "runtime/train/report.h"

#include <cmath>
#include <cstdio>

namespace dpg::train {
namespace {

// Null for an infinite or undefined value (DP off), since JSON has neither.
Json finite_or_null(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

// Null for a throughput the run was too short to measure, never a made-up 0.
Json timed_or_null(double v) { return v > 0 && std::isfinite(v) ? Json(v) : Json(nullptr); }

void merge(Json& j, const Json& extra) {
  for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
}

// Keys that name the evaluated split say which it was: validation_accuracy, not test_accuracy,
// for a run tuned on the validation rows.
void name_split(Json& j, const std::string& split) {
  if (split == "test") return;
  for (const char* key : {"test_accuracy", "test_loss", "test_accuracy_last_iterate",
                          "peer_test_accuracy", "peer_test_loss"}) {
    if (!j.contains(key)) continue;
    std::string renamed = key;
    renamed.replace(renamed.find("test"), 4, split);
    j[renamed] = std::move(j[key]);
    j.erase(key);
  }
}

}  // namespace

Json EpochReport::to_json() const {
  Json j = {{"epoch", epoch},
            {"step", step},
            {"wall_s", wall_s},
            {"test_accuracy", test_accuracy},
            {"test_loss", test_loss},
            {"epsilon", finite_or_null(epsilon)},
            {"message_epsilon", finite_or_null(message_epsilon)},
            {"samples_per_second", timed_or_null(samples_per_second)},
            {"lr", lr}};
  if (report_train) {
    j["loss"] = loss;
    j["train_accuracy"] = train_accuracy;
    j["train_metrics"] = "unprotected";
  }
  if (report_dropped) {
    j["dropped_examples"] = dropped_examples;
    j["skipped_batches"] = skipped_batches;
  }
  if (consensus_distance >= 0) {
    j["consensus_distance"] = consensus_distance;
    // A peer a polled report could not reach has no score (ConsensusPoll): null.
    Json& acc = j["peer_test_accuracy"] = Json::array();
    Json& loss = j["peer_test_loss"] = Json::array();
    for (double v : peer_test_accuracy) acc.push_back(finite_or_null(v));
    for (double v : peer_test_loss) loss.push_back(finite_or_null(v));
  }
  merge(j, extra);
  name_split(j, split);
  return j;
}

Json ConsensusReport::to_json() const {
  Json j = {{"step", round},
            {"round", round},
            {"epoch", epoch},
            {"wall_s", wall_s},
            {"consensus_distance", consensus_distance},
            {"epsilon", finite_or_null(epsilon)},
            {"message_epsilon", finite_or_null(message_epsilon)}};
  if (eval_rows > 0) {
    j["eval_rows"] = eval_rows;
    j["test_accuracy"] = test_accuracy;
    j["test_loss"] = test_loss;
    // A peer a polled report could not reach has no score (ConsensusPoll): null.
    Json& acc = j["peer_test_accuracy"] = Json::array();
    Json& loss = j["peer_test_loss"] = Json::array();
    for (double v : peer_test_accuracy) acc.push_back(finite_or_null(v));
    for (double v : peer_test_loss) loss.push_back(finite_or_null(v));
  }
  merge(j, extra);
  name_split(j, split);
  return j;
}

Json TrainSummary::to_json(const TrainConfig& c, const dp::PrivacyPlan& plan) const {
  const bool stopped = stopped_at >= 0;
  Json j = {{"test_accuracy", !stopped || evaluated ? Json(test_accuracy) : Json(nullptr)},
            {"test_accuracy_last_iterate",
             stopped ? Json(nullptr) : Json(test_accuracy_last_iterate)},
            {"epsilon", finite_or_null(epsilon)},
            {"message_epsilon", finite_or_null(message_epsilon)},
            {"peers", peers},
            {"algo", to_string(c.algo)},
            {"noise_mode", plan.noise_mode},
            {"target", plan.target},
            {"peer_noise_multiplier", plan.peer_sigma},
            {"best_alpha", finite_or_null(best_alpha)},
            {"delta", c.delta},
            {"dp", c.dp},
            {"noise_multiplier", plan.model_sigma},
            {"clip_norm", c.clip_norm},
            {"sample_rate", plan.q},
            {"sampling", to_string(c.sampling)},
            {"epochs", c.epochs},
            {"steps", stopped ? stopped_at : steps},
            {"samples_per_second", timed_or_null(samples_per_second)},
            {"wall_s", wall_s},
            {"topology", to_string(c.algo)},
            // A summed algorithm averages exactly every step (rho 0, gap 1); the others say
            // their own (gossip) or have none.
            {"rho", plan.release == dp::Release::summed ? Json(0.0) : Json(nullptr)},
            {"spectral_gap", plan.release == dp::Release::summed ? Json(1.0) : Json(nullptr)},
            {"accountant", accountant},
            {"config", dpg::to_json(c)}};
  if (!peer_epsilons.empty()) j["peer_epsilons"] = peer_epsilons;
  if (c.report_dropped) {
    j["dropped_examples"] = dropped_examples;
    j["skipped_batches"] = skipped_batches;
  }
  if (resumed_from >= 0) {
    j["resumed_from_step"] = resumed_from;
    j["replay_charged_steps"] = replay_charged_steps;
  }
  if (stopped) {
    j["stopped_at_step"] = stopped_at;
    j["planned_steps"] = steps;
  }
  if (!peer_test_accuracy.empty()) j["peer_test_accuracy"] = peer_test_accuracy;
  merge(j, extra);
  name_split(j, to_string(c.eval_split));
  if (c.dp && c.sampling != Sampling::poisson) {
    j["epsilon_note"] = "epsilon assumes Poisson sampling; this run used fixed-size shuffled batches";
  }
  return j;
}

std::string throughput_text(double samples_per_second) {
  if (!(samples_per_second > 0) || !std::isfinite(samples_per_second)) return "too short to time";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f samples/s", samples_per_second);
  return buf;
}

std::string progress_line(const EpochReport& r, int total_epochs) {
  char buf[320];
  // Six characters for the usual epsilons ("2.9997"); five significant digits from 1000 up, where
  // cutting the digits would misstate the magnitude (1e10 read as "100005").
  std::string eps = "inf";
  if (std::isfinite(r.epsilon) && r.epsilon < 1000) {
    eps = std::to_string(r.epsilon).substr(0, 6);
  } else if (std::isfinite(r.epsilon)) {
    char big[32];
    std::snprintf(big, sizeof big, "%.5g", r.epsilon);
    eps = big;
  }
  char train[96] = "";
  if (r.report_train) {
    std::snprintf(train, sizeof train, "  loss %.4f  train acc %.2f%% (unprotected)", r.loss,
                  100 * r.train_accuracy);
  }
  std::snprintf(buf, sizeof buf, "epoch %3d/%d%s  %s acc %.2f%%  eps %s  %s", r.epoch,
                total_epochs, train, r.split == "test" ? "test" : "val", 100 * r.test_accuracy,
                eps.c_str(), throughput_text(r.samples_per_second).c_str());
  std::string line = buf;
  // Said every epoch when asked for: a model fed non-finite values should not look healthy.
  if (r.report_dropped && r.dropped_examples > 0) {
    line += "  (" + std::to_string(r.dropped_examples) +
            " examples dropped for a non-finite feature or gradient)";
  }
  if (r.report_dropped && r.skipped_batches > 0) {
    line += "  (" + std::to_string(r.skipped_batches) + " batches skipped, all non-finite)";
  }
  return line;
}

}  // namespace dpg::train
