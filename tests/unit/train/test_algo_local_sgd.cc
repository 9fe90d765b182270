// Local SGD through the whole Trainer on in-process peers: with one local step it is the
// all-reduce algorithm, and with several it learns and ends with every replica equal.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "runtime/core/error.h"
#include "runtime/train/algorithm.h"
#include "tests/unit/train/peers.h"

namespace {

using namespace dpg;

TrainConfig config(const std::string& algo, double momentum) {
  // The noise multiplier is given, so that both algorithms' plans use it as it is.
  TrainConfig c = test::small_config(parse_enum<Algo>(algo));
  c.lr = 0.5;
  c.momentum = momentum;
  return c;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

}  // namespace

TEST_CASE("local-sgd: the table's line") {
  const auto& a = train::algo_info(Algo::local_sgd);
  CHECK(a.release == dp::Release::own);
  CHECK_FALSE(a.overlaps(TrainConfig{}));
  CHECK_FALSE(a.uses_graph);
}

TEST_CASE("local-sgd with one local step is the all-reduce algorithm") {
  // Equal shards, so every peer samples at the all-reduce's rate q; local noise for the
  // all-reduce, so each peer adds the full sigma in both. Local SGD divides each peer's noised sum
  // by its own expected batch B/N and averages the N models; the all-reduce sums the N noised
  // sums and divides by B: the same step, from the same model.
  //
  // With momentum, local SGD averages the parameters but not the peers' momentum buffers; it is
  // still the same: every step starts from the same average, and v_i <- mu v_i + g_i and
  // x_i <- x - lr (v_i + wd x) are linear, so mean(v_i) obeys the all-reduce's v <- mu v +
  // mean(g_i) and mean(x_i) = x - lr (mean(v_i) + wd x) is its step.
  for (double momentum : {0.0, 0.9}) {
    CAPTURE(momentum);
    TrainConfig local = config("local-sgd", momentum);
    local.local_steps = 1;
    TrainConfig all = config("allreduce", momentum);
    all.noise_mode = NoiseMode::local;
    const auto a = test::run_peers(4, local, 400);
    const auto b = test::run_peers(4, all, 400);
    for (const auto& p : a) REQUIRE(p.error == "");
    for (const auto& p : b) REQUIRE(p.error == "");
    for (const auto& p : a) CHECK(p.params == a[0].params);  // averaged after every step
    // Only the order of float additions differs (a mean of models, a sum of gradients).
    const float d = max_abs_diff(a[0].params, b[0].params);
    MESSAGE("momentum " << momentum << ": largest difference " << d);
    CHECK(d < 2e-5f);
    CHECK(a[0].summary.test_accuracy == doctest::Approx(b[0].summary.test_accuracy).epsilon(0.02));
  }
}

TEST_CASE("local-sgd with four local steps learns, and the last average makes the replicas one") {
  TrainConfig c = config("local-sgd", 0.9);
  c.local_steps = 4;
  c.epochs = 3.3;  // the last step is not a multiple of 4: it is averaged all the same
  const auto peers = test::run_peers(4, c, 400);
  for (const auto& p : peers) REQUIRE(p.error == "");
  for (const auto& p : peers) CHECK(p.params == peers[0].params);
  CHECK(peers[0].summary.test_accuracy > 0.8);
  REQUIRE(peers[0].summary.peer_epsilons.size() == 4);  // Release::own: each peer's own
  // Between averages the replicas differ: the epoch lines report how far apart they are.
  CHECK(peers[0].epochs.front().consensus_distance >= 0);
}

TEST_CASE("local_steps and bucket_bytes are validated") {
  TrainConfig c;
  c.algo = Algo::local_sgd;
  c.local_steps = 0;
  CHECK_THROWS_WITH_AS(validate(c), doctest::Contains("local_steps"), Error);
  c = TrainConfig{};
  c.algo = Algo::allreduce;
  c.bucket_bytes = -1;
  CHECK_THROWS_WITH_AS(validate(c), doctest::Contains("bucket_bytes"), Error);
}
