// The privacy plan: rates, per-peer noise and the epsilons it reports, against the accountant run
// by hand and the closed relations between the modes.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "dp/discrete_gaussian.h"
#include "dp/privacy_plan.h"
#include "runtime/core/error.h"

namespace dp = dpg::dp;

namespace {

dp::PlanInputs inputs(dp::Release release, std::vector<double> rows) {
  dp::PlanInputs in;
  in.release = release;
  in.shard_rows = std::move(rows);
  in.batch_size = 4096;
  in.epochs = 10;
  in.target_epsilon = 3;
  in.delta = 1e-5;
  return in;
}

}  // namespace

TEST_CASE("one peer: the plan is the accountant's calibration") {
  const auto p = dp::plan_privacy(inputs(dp::Release::summed, {60000}));
  CHECK(p.q == doctest::Approx(4096.0 / 60000).epsilon(1e-15));
  CHECK(p.steps == dp::steps_for_epochs(10, 4096.0 / 60000));
  CHECK(p.accountant == dp::AccountantKind::pld);
  CHECK(p.sigma == dp::calibrate_noise_multiplier(p.q, p.steps, 1e-5, 3, dp::AccountantKind::pld));
  CHECK(p.peer_sigma == p.sigma);
  CHECK(p.model_sigma == p.sigma);
  const auto end = p.model_after(p.steps);
  CHECK(end.epsilon <= 3.0);
  CHECK(end.epsilon > 2.99);
  CHECK(p.model_after(0).epsilon == 0.0);
}

TEST_CASE("summed, distributed noise: the sum carries sigma, each message sigma / sqrt(N)") {
  auto in = inputs(dp::Release::summed, {15000, 15000, 15000, 15000});
  const auto p = dp::plan_privacy(in);
  CHECK(p.noise_mode == "distributed");
  CHECK(p.peer_sigma == doctest::Approx(p.sigma / 2));
  CHECK(p.model_sigma == p.sigma);
  CHECK(p.message_sigma == p.peer_sigma);
  for (double qj : p.peer_q) CHECK(qj == p.q);
  for (double b : p.peer_batch) CHECK(b == 4096);
  CHECK(p.model_after(p.steps).epsilon <= 3.0);
  // Each message alone carries half the noise: far more than 3.
  CHECK(p.messages_after(p.steps).epsilon > 6.0);
}

TEST_CASE("summed, local noise: each message carries sigma, the sum sigma * sqrt(N)") {
  auto in = inputs(dp::Release::summed, {15000, 15000, 15000, 15000});
  in.distributed_noise = false;
  const auto p = dp::plan_privacy(in);
  CHECK(p.noise_mode == "local");
  CHECK(p.peer_sigma == p.sigma);
  CHECK(p.model_sigma == doctest::Approx(2 * p.sigma));
  CHECK(p.messages_after(p.steps).epsilon <= 3.0);
  CHECK(p.model_after(p.steps).epsilon < p.messages_after(p.steps).epsilon);
}

TEST_CASE("target messages: summed release meets the target in every message") {
  auto in = inputs(dp::Release::summed, {15000, 15000, 15000, 15000});
  in.target_messages = true;  // with distributed_noise still true
  const auto p = dp::plan_privacy(in);
  CHECK(p.target == "messages");
  CHECK(p.noise_mode == "local");
  CHECK(p.message_sigma == p.sigma);
  CHECK(p.model_sigma == doctest::Approx(2 * p.sigma));
  const double msg = p.messages_after(p.steps).epsilon;
  CHECK(msg <= 3.0);
  CHECK(msg > 2.9);  // calibrated for the messages, not over-noised
  CHECK(p.model_after(p.steps).epsilon < msg);
  // The default targets the model: its messages alone are then far weaker.
  in.target_messages = false;
  const auto m = dp::plan_privacy(in);
  CHECK(m.target == "model");
  CHECK(m.model_after(m.steps).epsilon > 2.9);
  CHECK(m.messages_after(m.steps).epsilon > 6.0);
}

TEST_CASE("own release: each peer samples its own shard and the worst rate sets sigma") {
  auto in = inputs(dp::Release::own, {10000, 20000, 15000, 15000});
  in.distributed_noise = true;  // ignored: nothing sums the noise
  const auto p = dp::plan_privacy(in);
  CHECK(p.noise_mode == "local");
  CHECK(p.worst_peer == 0);
  CHECK(p.peer_q[0] == doctest::Approx(1024.0 / 10000));
  CHECK(p.peer_q[1] == doctest::Approx(1024.0 / 20000));
  for (double b : p.peer_batch) CHECK(b == 1024);
  CHECK(p.peer_sigma == p.sigma);
  CHECK(p.model_sigma == p.sigma);
  CHECK(p.sigma ==
        dp::calibrate_noise_multiplier(1024.0 / 10000, p.steps, 1e-5, 3, dp::AccountantKind::pld));
  const auto eps = p.peer_epsilons_after(p.steps);
  REQUIRE(eps.size() == 4);
  CHECK(eps[0] == p.model_after(p.steps).epsilon);
  CHECK(eps[1] < eps[0]);
  CHECK(eps[2] == eps[3]);
  // The accountant the trainer steps agrees with the plan.
  dp::Accountant acc(p.accountant);
  for (long long t = 0; t < p.steps; ++t) acc.step(p.accountant_q(), p.model_sigma);
  CHECK(acc.spent(1e-5).epsilon == doctest::Approx(p.model_after(p.steps).epsilon).epsilon(1e-12));
}

TEST_CASE("the plan's accountant calibrates and reports: RDP needs more noise than PLD") {
  auto in = inputs(dp::Release::summed, {60000});
  in.accountant = dp::AccountantKind::rdp;
  const auto rdp = dp::plan_privacy(in);
  CHECK(rdp.accountant == dp::AccountantKind::rdp);
  CHECK(rdp.sigma == dp::calibrate_noise_multiplier(rdp.q, rdp.steps, 1e-5, 3,
                                                    dp::AccountantKind::rdp));
  CHECK(rdp.model_after(rdp.steps).epsilon <= 3.0);
  CHECK(rdp.model_after(rdp.steps).epsilon ==
        dp::epsilon_for(rdp.q, rdp.sigma, rdp.steps, 1e-5, dp::AccountantKind::rdp).epsilon);
  in.accountant = dp::AccountantKind::pld;
  const auto pld = dp::plan_privacy(in);
  CHECK(pld.sigma < rdp.sigma * 0.97);
  // The PLD's epsilon at RDP's sigma is well below 3: the RDP bound is loose.
  CHECK(dp::epsilon_for(rdp.q, rdp.sigma, rdp.steps, 1e-5, dp::AccountantKind::pld).epsilon < 2.9);
}

TEST_CASE("a given noise multiplier is used as is; without DP every epsilon is infinite") {
  auto in = inputs(dp::Release::summed, {30000, 30000});
  in.noise_multiplier = 1.5;
  const auto p = dp::plan_privacy(in);
  CHECK(p.sigma == 1.5);
  CHECK(p.peer_sigma == doctest::Approx(1.5 / std::sqrt(2.0)));
  in.dp = false;
  const auto off = dp::plan_privacy(in);
  CHECK(std::isinf(off.model_after(off.steps).epsilon));
  CHECK(std::isinf(off.peer_epsilons_after(off.steps)[1]));
  CHECK(off.peer_sigma == 0);
}

TEST_CASE("impossible plans are refused naming the cause") {
  auto in = inputs(dp::Release::own, {100, 60000});
  CHECK_THROWS_WITH_AS(dp::plan_privacy(in), doctest::Contains("exceeds peer 0's"), dpg::Error);
  in = inputs(dp::Release::summed, {1000, 1000});
  CHECK_THROWS_WITH_AS(dp::plan_privacy(in), doctest::Contains("exceeds the"), dpg::Error);
  in = inputs(dp::Release::summed, {1000, 0});
  CHECK_THROWS_WITH_AS(dp::plan_privacy(in), doctest::Contains("peer 1's training shard is empty"),
                       dpg::Error);
}

TEST_CASE("secure aggregation: the grid, the Skellam noise and the epsilons per party") {
  auto in = inputs(dp::Release::summed, {15000, 15000, 15000, 15000});
  in.secure_aggregation = true;
  in.num_params = 203530;
  in.widest_layer = 784;
  const auto p = dp::plan_privacy(in);
  const auto& g = p.secagg;
  CHECK(p.secure_aggregation);
  CHECK(p.noise_mode == "distributed");
  // A power of two, at most 2^16 (the model's int32 sums of 4096 examples on the grid), whose
  // worst-case sum (batch bound, each example's entry at most scale (1 + eta) + 1/2 steps, 12
  // standard deviations of noise) fits int32; here the 2^16 cap is what binds.
  const double eta = dp::float_allowance(784);
  const double entry = g.grid_scale * (1 + eta) + 0.5;
  CHECK(std::exp2(std::round(std::log2(g.grid_scale))) == g.grid_scale);
  CHECK(g.grid_scale == 65536);
  CHECK(entry * g.batch_bound + 12 * std::sqrt(2 * g.mu) <= 2147483647.0);
  CHECK(g.batch_bound > 4096 + 6 * 64);
  // One example moves a peer's exact grid sum by its own integer vector: the clipping's float
  // allowance on the scale, half a step of rounding per value.
  CHECK(g.l2 == doctest::Approx(g.grid_scale * (1 + eta) + std::sqrt(203530.0) / 2));
  CHECK(g.l1 == doctest::Approx(std::sqrt(203530.0) * g.grid_scale * (1 + eta) + 203530 / 2.0));
  CHECK(g.peer_mu * 4 == doctest::Approx(g.mu));
  CHECK(g.overflow_bound < 1e-20);
  // The target holds for the model, just; a curious peer (3 of the 4 shares) learns more, but
  // far less than from a plain distributed run's messages.
  const double model = p.model_after(p.steps).epsilon;
  CHECK(model <= 3.0);
  CHECK(model > 2.99);
  const double peers = p.peers_after(p.steps).epsilon;
  CHECK(peers > model);
  CHECK(p.messages_after(p.steps).epsilon == peers);
  in.secure_aggregation = false;
  CHECK(peers < dp::plan_privacy(in).messages_after(p.steps).epsilon / 1.5);
  // The reported multiplier is the Gaussian equivalent: sqrt(2 mu) / grid_scale.
  CHECK(p.model_sigma == doctest::Approx(std::sqrt(2 * g.mu) / g.grid_scale));
  CHECK(p.peer_sigma == doctest::Approx(p.model_sigma / 2));
  for (double e : p.peer_epsilons_after(p.steps)) CHECK(e == model);
}

TEST_CASE("the plan's accounts: charged steps re-evaluate to the plan's epsilons, Skellam too") {
  for (bool secagg : {false, true}) {
    CAPTURE(secagg);
    auto in = inputs(dp::Release::summed, {15000, 15000, 15000, 15000});
    in.secure_aggregation = secagg;
    in.num_params = 203530;
    in.widest_layer = 784;
    const auto p = dp::plan_privacy(in);
    dp::Accountant model = p.new_account(), messages = p.new_account();
    CHECK(model.is_skellam() == secagg);
    p.charge(model, messages, p.steps - 10);
    for (int i = 0; i < 10; ++i) p.charge(model, messages);
    CHECK(model.steps() == p.steps);
    CHECK(model.spent(p.delta).epsilon == p.model_after(p.steps).epsilon);
    CHECK(messages.spent(p.delta).epsilon == p.messages_after(p.steps).epsilon);
    // The saved account reads back to the same epsilon: a Skellam run's account is not read as a
    // Gaussian of its equivalent sigma (which would report far less).
    const auto back = dp::Accountant::from_json(model.to_json());
    CHECK(back == model);
    CHECK(back.spent(p.delta).epsilon == p.model_after(p.steps).epsilon);
    if (secagg) {
      CHECK(model.to_json()["mechanism"] == "poisson_skellam");
      CHECK(dp::epsilon_for(p.accountant_q(), p.model_sigma, p.steps, p.delta, p.accountant)
                .epsilon < 0.9 * model.spent(p.delta).epsilon);
    }
  }
}

TEST_CASE("secure aggregation: one peer, or a release that is not summed, is refused") {
  auto one = inputs(dp::Release::summed, {60000});
  one.secure_aggregation = true;
  one.num_params = 1000;
  CHECK_THROWS_WITH(dp::plan_privacy(one), doctest::Contains("at least 2 peers"));
  auto own = inputs(dp::Release::own, {30000, 30000});
  own.secure_aggregation = true;
  own.num_params = 1000;
  CHECK_THROWS_WITH(dp::plan_privacy(own), doctest::Contains("summed release"));
}

TEST_CASE("another party's calibrated multiplier: the same plan when it meets the target, "
          "else refused") {
  for (const auto release : {dp::Release::summed, dp::Release::own}) {
    auto in = inputs(release, {15000, 15000, 20000, 10000});
    in.distributed_noise = true;
    const auto searched = dp::plan_privacy(in);
    const auto taken = dp::plan_with_multiplier_from(in, searched.sigma, "rank 0");
    CHECK(taken.sigma == searched.sigma);
    CHECK(taken.model_sigma == searched.model_sigma);
    CHECK(taken.peer_sigma == searched.peer_sigma);
    CHECK(taken.message_sigma == searched.message_sigma);
    CHECK(taken.steps == searched.steps);
    CHECK(taken.model_after(taken.steps).epsilon == searched.model_after(searched.steps).epsilon);
    // 1% less noise than the search's smallest: above the target, whatever the other party says.
    CHECK_THROWS_WITH_AS(dp::plan_with_multiplier_from(in, searched.sigma * 0.99, "rank 1: rank 0"),
                         doctest::Contains("rank 1: rank 0's noise multiplier"), dpg::Error);
    CHECK_THROWS_WITH_AS(dp::plan_with_multiplier_from(in, searched.sigma * 0.99, "rank 0"),
                         doctest::Contains("above target_epsilon 3"), dpg::Error);
    CHECK_THROWS_AS(dp::plan_with_multiplier_from(in, std::nan(""), "rank 0"), dpg::Error);
    CHECK_THROWS_AS(dp::plan_with_multiplier_from(in, -1.0, "rank 0"), dpg::Error);
  }
  auto in = inputs(dp::Release::summed, {30000, 30000});
  in.noise_multiplier = 1.0;  // nothing to calibrate: nothing to take
  CHECK_THROWS_AS(dp::plan_with_multiplier_from(in, 1.0, "rank 0"), dpg::Error);
}

TEST_CASE("a rate cap: sigma calibrated for it, charges above it refused") {
  for (dp::Release release : {dp::Release::summed, dp::Release::own}) {
    dp::PlanInputs in = inputs(release, {15000, 15000, 15000, 15000});
    const double q = 4096.0 / 60000;
    in.rate_cap = 2 * q;
    const auto p = dp::plan_privacy(in);
    CHECK(p.calibration_q() == doctest::Approx(2 * q));
    // The multiplier meets the target at the cap for every step, and is larger than without it.
    dp::Accountant at_cap;
    at_cap.step(2 * q, p.sigma, p.steps);
    CHECK(at_cap.spent(in.delta).epsilon <= 3.0);
    dp::PlanInputs plain = in;
    plain.rate_cap = 0;
    CHECK(p.sigma > dp::plan_privacy(plain).sigma);
    // Charges at the cap are taken, above it refused.
    dp::Accountant model = p.new_account(), messages = p.new_account();
    p.charge_at(2 * q, model, messages, 3);
    CHECK(model.steps() == 3);
    CHECK_THROWS_AS(p.charge_at(2.01 * q, model, messages), dpg::Error);
    // A start rate above the cap is refused, naming the peer.
    in.peer_share = {0.7, 0.1, 0.1, 0.1};
    CHECK_THROWS_WITH_AS(dp::plan_privacy(in), doctest::Contains("peer 0's rate"), dpg::Error);
  }
}

TEST_CASE("balanced shares: each peer's rate from its share, its epsilon the accountant's") {
  // A load balancer's shares over uneven shards, with rows in place: peer j samples its rows at
  // batch * share_j / rows_j; the worst rate sets sigma; each peer's epsilon is an account of its
  // own (rate, sigma, steps), recomputed here by hand.
  for (dp::Release release : {dp::Release::summed, dp::Release::own}) {
    dp::PlanInputs in = inputs(release, {15000, 15000, 15000, 15000});
    in.peer_share = {0.3, 0.3, 0.3, 0.1};
    const auto p = dp::plan_privacy(in);
    for (std::size_t j = 0; j < 4; ++j) {
      CHECK(p.peer_q[j] == doctest::Approx(4096 * in.peer_share[j] / 15000).epsilon(1e-15));
      // The denominator: the global batch, or an even share of it, whatever the peer's share.
      CHECK(p.peer_batch[j] == doctest::Approx(release == dp::Release::summed ? 4096.0 : 1024.0));
    }
    CHECK(p.worst_peer == 0);
    CHECK(p.model_after(p.steps).epsilon <= 3.0);
    const std::vector<double> eps = p.peer_epsilons_after(p.steps);
    for (std::size_t j = 0; j < 4; ++j) {
      dp::Accountant a;
      a.step(p.peer_q[j], p.model_sigma, p.steps);
      CHECK(eps[j] == doctest::Approx(a.spent(in.delta).epsilon).epsilon(1e-12));
      CHECK(eps[j] <= eps[0] + 1e-12);
    }
    CHECK(eps[3] < eps[0]);  // the slow peer samples less often
  }
  // Shares in proportion to re-sharded rows: every peer samples at the global rate, under either
  // release, and no peer's epsilon passes the target.
  for (dp::Release release : {dp::Release::summed, dp::Release::own}) {
    dp::PlanInputs in = inputs(release, {20000, 20000, 15000, 5000});
    in.peer_share = {20000.0 / 60000, 20000.0 / 60000, 15000.0 / 60000, 5000.0 / 60000};
    const auto p = dp::plan_privacy(in);
    for (double q : p.peer_q) CHECK(q == doctest::Approx(4096.0 / 60000).epsilon(1e-12));
    for (double e : p.peer_epsilons_after(p.steps)) CHECK(e <= 3.0);
  }
  // Rows a balancer gave (their shares rows / total): batch x share / rows rounds differently
  // per peer, yet every peer reports one rate, never below the global one.
  for (dp::Release release : {dp::Release::summed, dp::Release::own}) {
    const std::vector<double> rows = {17701, 18128, 18102, 6069};
    dp::PlanInputs in = inputs(release, rows);
    for (double r : rows) in.peer_share.push_back(r / 60000);
    const auto p = dp::plan_privacy(in);
    for (double q : p.peer_q) {
      CHECK(q == p.peer_q[0]);
      CHECK(q >= 4096.0 / 60000);
    }
  }
  dp::PlanInputs bad = inputs(dp::Release::own, {15000, 15000});
  bad.peer_share = {0.9, 0.2};
  CHECK_THROWS_WITH_AS(dp::plan_privacy(bad), doctest::Contains("sum to 1"), dpg::Error);
  bad.peer_share = {1.0};
  CHECK_THROWS_WITH_AS(dp::plan_privacy(bad), doctest::Contains("one share per peer"), dpg::Error);
}
