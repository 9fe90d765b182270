// The epoch line and the summary report what ran: dropped examples every epoch, and a run too
// short to time says so instead of "0 samples/s".
#include <doctest/doctest.h>

#include "runtime/train/report.h"

using namespace dpg::train;

TEST_CASE("report: dropped examples appear on the epoch line, not only in JSON") {
  EpochReport r;
  r.epoch = 1;
  r.samples_per_second = 1000;
  r.dropped_examples = 3;
  const std::string line = progress_line(r, 2);
  CHECK(line.find("3 examples dropped") != std::string::npos);
  CHECK(r.to_json()["dropped_examples"] == 3);
  r.dropped_examples = 0;
  CHECK(progress_line(r, 2).find("dropped") == std::string::npos);
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
