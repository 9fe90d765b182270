// The epoch line and the summary report what ran: dropped examples every epoch, and a run too
// short to time says so instead of "0 samples/s"; a polled consensus report's spread.
#include <doctest/doctest.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/train/consensus_poll.h"
#include "runtime/train/report.h"

using namespace dpg::train;

TEST_CASE("report: dropped examples and skipped batches appear only when asked for") {
  EpochReport r;
  r.epoch = 1;
  r.samples_per_second = 1000;
  r.dropped_examples = 3;
  r.skipped_batches = 2;
  // Not by default: the counts depend on the private data and no noise covers them.
  CHECK(progress_line(r, 2).find("dropped") == std::string::npos);
  CHECK_FALSE(r.to_json().contains("dropped_examples"));
  CHECK_FALSE(r.to_json().contains("skipped_batches"));
  r.report_dropped = true;
  const std::string line = progress_line(r, 2);
  CHECK(line.find("3 examples dropped") != std::string::npos);
  CHECK(line.find("2 batches skipped") != std::string::npos);
  CHECK(r.to_json()["dropped_examples"] == 3);
  CHECK(r.to_json()["skipped_batches"] == 2);
  r.dropped_examples = 0;
  CHECK(progress_line(r, 2).find("dropped") == std::string::npos);
  // The summary likewise, by the config.
  TrainSummary s;
  s.dropped_examples = 5;
  dpg::TrainConfig c;
  dpg::dp::PrivacyPlan plan;
  CHECK_FALSE(s.to_json(c, plan).contains("dropped_examples"));
  c.report_dropped = true;
  CHECK(s.to_json(c, plan)["dropped_examples"] == 5);
}

TEST_CASE("report: training metrics only when asked for, marked unprotected; a validation run "
          "names its split") {
  EpochReport r;
  r.test_accuracy = 0.5;
  r.loss = 0.75;
  r.train_accuracy = 0.8;
  // Not by default: they come from private batches without noise.
  for (const char* key : {"loss", "train_accuracy", "train_metrics"}) {
    CHECK_FALSE(r.to_json().contains(key));
  }
  CHECK(progress_line(r, 1).find("train acc") == std::string::npos);
  r.report_train = true;
  CHECK(r.to_json()["train_metrics"] == "unprotected");
  CHECK(r.to_json()["loss"] == 0.75);
  CHECK(progress_line(r, 1).find("train acc 80.00% (unprotected)") != std::string::npos);
  CHECK(r.to_json()["test_accuracy"] == 0.5);
  r.split = "validation";
  CHECK(r.to_json()["validation_accuracy"] == 0.5);
  CHECK_FALSE(r.to_json().contains("test_accuracy"));
  CHECK(progress_line(r, 1).find("val acc 50.00%") != std::string::npos);
  TrainSummary s;
  s.test_accuracy = 0.25;
  s.test_accuracy_last_iterate = 0.2;
  dpg::TrainConfig c;
  c.eval_split = dpg::EvalSplit::validation;
  dpg::dp::PrivacyPlan plan;
  const auto j = s.to_json(c, plan);
  CHECK(j["validation_accuracy"] == 0.25);
  CHECK(j["validation_accuracy_last_iterate"] == 0.2);
  CHECK_FALSE(j.contains("test_accuracy"));
}

TEST_CASE("report: a run too short to time says so; its throughput is null, never 0") {
  CHECK(throughput(100, 0.0) == 0.0);
  CHECK(throughput(100, 1e-6) == 0.0);
  CHECK(throughput(100, 2.0) == doctest::Approx(50.0));
  EpochReport r;
  r.samples_per_second = throughput(100, 0.0);
  CHECK(progress_line(r, 1).find("too short to time") != std::string::npos);
  CHECK(r.to_json()["samples_per_second"].is_null());
  CHECK(throughput_text(1234.4) == "1234 samples/s");
  TrainSummary s;
  dpg::TrainConfig c;
  dpg::dp::PrivacyPlan plan;
  CHECK(s.to_json(c, plan)["samples_per_second"].is_null());
}

TEST_CASE("report: the epoch line's epsilon keeps its magnitude") {
  EpochReport r;
  r.epoch = 1;
  auto eps_of = [&](double e) {
    r.epsilon = e;
    const std::string line = progress_line(r, 1);
    const std::size_t at = line.find("eps ") + 4;
    return line.substr(at, line.find(' ', at) - at);
  };
  CHECK(eps_of(2.9997513) == "2.9997");
  CHECK(eps_of(999.123) == "999.12");
  CHECK(eps_of(1234.56) == "1234.6");
  CHECK(eps_of(10000562913.0) == "1.0001e+10");
  CHECK(eps_of(std::numeric_limits<double>::infinity()) == "inf");
}

TEST_CASE("report: a stopped run's summary says what ran, and nothing that did not") {
  dpg::TrainConfig c;
  dpg::dp::PrivacyPlan plan;
  TrainSummary s;
  s.steps = 100;
  s.test_accuracy = 0.8;
  s.test_accuracy_last_iterate = 0.79;
  const dpg::Json done = s.to_json(c, plan);
  CHECK(done["steps"] == 100);
  CHECK(done["test_accuracy"] == 0.8);
  CHECK(done["test_accuracy_last_iterate"] == 0.79);
  CHECK_FALSE(done.contains("planned_steps"));
  CHECK_FALSE(done.contains("stopped_at_step"));
  // Stopped at step 30 in its first epoch: nothing was evaluated.
  s.stopped_at = 30;
  s.test_accuracy = 0;
  s.test_accuracy_last_iterate = 0;
  const dpg::Json early = s.to_json(c, plan);
  CHECK(early["steps"] == 30);
  CHECK(early["planned_steps"] == 100);
  CHECK(early["stopped_at_step"] == 30);
  CHECK(early["test_accuracy"].is_null());
  CHECK(early["test_accuracy_last_iterate"].is_null());
  // Stopped after an evaluated epoch: that epoch's accuracy, still no last iterate.
  s.evaluated = true;
  s.test_accuracy = 0.6;
  const dpg::Json later = s.to_json(c, plan);
  CHECK(later["test_accuracy"] == 0.6);
  CHECK(later["test_accuracy_last_iterate"].is_null());
}

TEST_CASE("Spread: the polled reports' mean and consensus distance, against a direct sum") {
  // Models far from 0 and close together: the sums of squares cancel almost entirely.
  std::mt19937_64 gen(7);
  std::normal_distribution<double> noise(0.0, 1e-3);
  const std::size_t values = 5000;
  std::vector<std::vector<float>> models(5, std::vector<float>(values));
  for (auto& m : models) {
    for (std::size_t i = 0; i < values; ++i) m[i] = static_cast<float>(3.0 + 0.001 * i + noise(gen));
  }
  Spread spread(values);
  for (const auto& m : models) spread.add(m);
  REQUIRE(spread.count() == 5);
  std::vector<double> mean(values, 0.0);
  for (const auto& m : models) {
    for (std::size_t i = 0; i < values; ++i) mean[i] += m[i] / 5.0;
  }
  double direct = 0;
  for (const auto& m : models) {
    for (std::size_t i = 0; i < values; ++i) direct += (m[i] - mean[i]) * (m[i] - mean[i]) / 5.0;
  }
  CHECK(spread.distance() == doctest::Approx(direct).epsilon(1e-9));
  std::vector<float> got(values);
  spread.mean(got);
  for (std::size_t i = 0; i < values; i += 499) CHECK(got[i] == doctest::Approx(mean[i]));
  // One model, or the same model twice: no spread.
  Spread one(values);
  one.add(models[0]);
  one.add(models[0]);
  CHECK(one.distance() == 0);
  CHECK(Spread(values).distance() == 0);
}
