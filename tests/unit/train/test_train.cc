#include <doctest/doctest.h>

#include <cmath>
#include <utility>
#include <set>
#include <string>

#include "runtime/core/error.h"
#include "runtime/core/rng.h"
#include "runtime/core/train_config.h"
#include "runtime/train/optimizer.h"
#include "runtime/train/sampler.h"
#include "runtime/train/trainer.h"
#include "dp/accountant.h"
#include "tests/unit/train/blobs.h"

namespace {

std::string error_of(const dpg::Json& j) {
  try {
    dpg::train_config_from_json(j, "cfg.json:");
  } catch (const dpg::Error& e) {
    return e.what();
  }
  return "";
}

using dpg::test::blobs;

dpg::TrainConfig small_config() {
  dpg::TrainConfig c;
  c.hidden = {16};
  c.epochs = 5;
  c.batch_size = 200;
  c.lr = 2.0;
  c.noise_multiplier = 0.8;
  c.threads = 1;
  c.noise_seed = 7;
  c.ema_decay = 0;
  c.momentum = 0;
  c.metrics = "";
  return c;
}

}  // namespace

TEST_CASE("poisson sampler: batch size is Binomial(n, q) and indices are distinct, ascending") {
  const std::size_t n = 10000;
  const double q = 0.03;
  dpg::train::PoissonSampler s(n, q, dpg::Rng(1));
  double sum = 0, sum2 = 0;
  std::vector<int> hits(n, 0);
  const int steps = 2000;
  for (int t = 0; t < steps; ++t) {
    const auto& b = s.next();
    for (std::size_t i = 1; i < b.size(); ++i) CHECK(b[i - 1] < b[i]);
    for (auto i : b) hits[i]++;
    sum += b.size();
    sum2 += static_cast<double>(b.size()) * b.size();
  }
  const double mean = sum / steps;
  const double var = sum2 / steps - mean * mean;
  CHECK(mean == doctest::Approx(n * q).epsilon(0.01));
  CHECK(var == doctest::Approx(n * q * (1 - q)).epsilon(0.1));
  // Each example joins about q * steps = 60 times; none is never or always picked.
  int low = 0;
  for (int h : hits) low += h < 30 ? 1 : 0;
  CHECK(low < 5);
}

TEST_CASE("poisson sampler: tiny q gives empty batches; q = 1 takes everything") {
  dpg::train::PoissonSampler tiny(100, 0.001, dpg::Rng(2));
  int empty = 0;
  for (int t = 0; t < 100; ++t) empty += tiny.next().empty() ? 1 : 0;
  CHECK(empty > 80);
  dpg::train::PoissonSampler all(50, 1.0, dpg::Rng(3));
  CHECK(all.next().size() == 50);
  CHECK_THROWS_AS(dpg::train::PoissonSampler(10, 0.0, dpg::Rng(4)), dpg::Error);
}

TEST_CASE("shuffle sampler: one pass covers every example once") {
  dpg::train::ShuffleSampler s(100, 10, dpg::Rng(5));
  std::set<std::size_t> seen;
  for (int t = 0; t < 10; ++t) {
    for (auto i : s.next()) seen.insert(i);
  }
  CHECK(seen.size() == 100);
}

TEST_CASE("train config: errors name the file and the JSON path") {
  CHECK(error_of({{"lr", 0.1}}).empty());
  CHECK(error_of({{"lr", "fast"}}).find("cfg.json:/lr") != std::string::npos);
  CHECK(error_of({{"learning_rate", 0.1}}).find("/learning_rate: unknown field") != std::string::npos);
  CHECK(error_of({{"hidden", {256, -1}}}).find("/hidden") != std::string::npos);
  CHECK(error_of({{"delta", 2.0}}).find("/delta") != std::string::npos);
  CHECK(error_of({{"sampling", "random"}}).find("/sampling") != std::string::npos);
  const auto c = dpg::train_config_from_json(dpg::to_json(small_config()), "x");
  CHECK(c.hidden == std::vector<int>{16});
  CHECK(c.noise_multiplier == 0.8);
}

TEST_CASE("sgd: momentum follows PyTorch's rule") {
  dpg::dp::MechanismOptions mo;
  mo.enabled = false;
  dpg::dp::GaussianMechanism mech(2, mo, 0, 0);
  dpg::train::Sgd sgd(2, {.lr = 0.1, .momentum = 0.5});
  std::vector<float> p{1.0f, 2.0f};
  for (int t = 0; t < 2; ++t) {
    auto g = mech.begin_step();
    g[0] = 1.0f;
    g[1] = -2.0f;
    sgd.apply(p, mech.release());
  }
  // v1 = g, v2 = 0.5 g + g = 1.5 g; p = p0 - 0.1 (g + 1.5 g) = p0 - 0.25 g
  CHECK(p[0] == doctest::Approx(0.75));
  CHECK(p[1] == doctest::Approx(2.5));
}

TEST_CASE("trainer: DP-SGD learns separable blobs and accounts every step") {
  dpg::data::Prepared data{blobs(4000, 1), blobs(1000, 2), {}};
  const auto c = small_config();
  dpg::train::Trainer trainer(c, data);
  CHECK(trainer.sample_rate() == doctest::Approx(0.05));
  CHECK(trainer.total_steps() == 100);
  int reports = 0;
  double last_eps = 0;
  const auto s = trainer.run([&](const dpg::train::EpochReport& r) {
    ++reports;
    CHECK(r.epsilon > last_eps);
    last_eps = r.epsilon;
  });
  CHECK(reports == 5);
  CHECK(s.steps == 100);
  CHECK(s.test_accuracy > 0.9);
  // The config's accountant (PLD by default) computes what the run reports.
  CHECK(c.accountant == dpg::PrivacyAccountant::pld);
  CHECK(s.epsilon == doctest::Approx(dpg::dp::epsilon_for(0.05, 0.8, 100, 1e-5,
                                                          dpg::dp::AccountantKind::pld)
                                         .epsilon));
  auto rdp_config = c;
  rdp_config.accountant = dpg::PrivacyAccountant::rdp;
  rdp_config.epochs = 1;
  dpg::train::Trainer rdp_trainer(rdp_config, data);
  const auto rdp = rdp_trainer.run([](const dpg::train::EpochReport&) {});
  CHECK(rdp.epsilon == doctest::Approx(dpg::dp::epsilon_for(0.05, 0.8, 20, 1e-5,
                                                            dpg::dp::AccountantKind::rdp)
                                           .epsilon));
}

TEST_CASE("trainer: a fraction of an epoch is one epoch of at least one step, reported") {
  dpg::TrainConfig c = small_config();
  const std::pair<double, int> cases[] = {{1e-9, 1}, {0.3, 1}, {2.5, 3}, {3.0, 3}, {3.0000000001, 3}};
  for (const auto& [epochs, count] : cases) {
    c.epochs = epochs;
    CAPTURE(epochs);
    CHECK(dpg::epoch_count(c) == count);
  }
  c.epochs = 1e-9;  // the table's first row, now run
  dpg::data::Prepared data{blobs(1000, 1), blobs(200, 2), {}};
  dpg::train::Trainer trainer(c, data);
  CHECK(trainer.total_steps() == 1);
  int reports = 0;
  long long last_step = -1;
  const auto s = trainer.run([&](const dpg::train::EpochReport& r) {
    ++reports;
    last_step = r.step;
    CHECK(r.epsilon > 0);
  });
  // The one step ran, was evaluated and accounted: no summary of a run that did nothing.
  CHECK(reports == 1);
  CHECK(last_step == 1);
  CHECK(s.steps == 1);
  CHECK(s.epsilon > 0);
  CHECK(s.test_accuracy > 0);
}

TEST_CASE("trainer: without a noise seed the noise is secret: two runs differ") {
  dpg::data::Prepared data{blobs(2000, 3), blobs(500, 4), {}};
  auto c = small_config();
  c.epochs = 2;
  c.noise_seed = 0;
  c.hidden = {64};
  // Different secret noise gives different models, seen in the test loss.
  double losses[2];
  for (double& l : losses) {
    dpg::train::Trainer t(c, data);
    t.run([&](const dpg::train::EpochReport& r) { l = r.test_loss; });
  }
  CHECK(losses[0] != losses[1]);
}

TEST_CASE("trainer: the same seed gives the same model; calibration meets the target") {
  dpg::data::Prepared data{blobs(2000, 3), blobs(500, 4), {}};
  auto c = small_config();
  c.epochs = 2;
  const auto a = dpg::train::Trainer(c, data).run([](const auto&) {});
  const auto b = dpg::train::Trainer(c, data).run([](const auto&) {});
  CHECK(a.test_accuracy == b.test_accuracy);
  CHECK(a.test_accuracy_last_iterate == b.test_accuracy_last_iterate);
  c.noise_multiplier = 0;
  c.target_epsilon = 2.0;
  dpg::train::Trainer calibrated(c, data);
  const auto s = calibrated.run([](const auto&) {});
  CHECK(s.epsilon <= 2.0);
  CHECK(s.epsilon > 1.99);
  c.batch_size = 5000;
  CHECK_THROWS_AS(dpg::train::Trainer(c, data), dpg::Error);
}
