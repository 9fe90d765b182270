// The load balancer's arithmetic (runtime/train/balance.h) and its calibration work, and the
// rows it re-shards (counted_indices): disjoint, covering, in proportion.
#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <numeric>
#include <set>
#include <thread>

#include "runtime/core/error.h"
#include "runtime/data/dataset.h"
#include "dp/accountant.h"
#include "runtime/train/balance.h"
#include "runtime/train/evaluate.h"
#include "tests/unit/train/peers.h"

using dpg::train::row_counts;
using dpg::train::shares_of;

TEST_CASE("shares follow the speeds, with a floor for a peer nearly stopped") {
  const auto s = shares_of({300, 300, 300, 75});
  CHECK(s[0] == doctest::Approx(300.0 / 975));
  CHECK(s[3] == doctest::Approx(75.0 / 975));
  CHECK(std::accumulate(s.begin(), s.end(), 0.0) == doctest::Approx(1.0));
  const auto floored = shares_of({1000, 1000, 1000, 0.001});
  CHECK(floored[3] == doctest::Approx(0.0125 / 1.0125).epsilon(1e-6));  // 5% of an even share
  CHECK(std::accumulate(floored.begin(), floored.end(), 0.0) == doctest::Approx(1.0));
  CHECK_THROWS_AS(shares_of({1, 0}), dpg::Error);
  CHECK_THROWS_AS(shares_of({}), dpg::Error);
}

TEST_CASE("row counts add up and follow the shares") {
  const auto c = row_counts(60000, {0.3, 0.3, 0.3, 0.1});
  CHECK(std::accumulate(c.begin(), c.end(), std::size_t{0}) == 60000);
  CHECK(c[3] >= 5999);
  CHECK(c[3] <= 6001);
  const auto tiny = row_counts(5, {0.97, 0.01, 0.01, 0.01});
  CHECK(std::accumulate(tiny.begin(), tiny.end(), std::size_t{0}) == 5);
  for (auto n : tiny) CHECK(n >= 1);
  CHECK_THROWS_AS(row_counts(3, {0.25, 0.25, 0.25, 0.25}), dpg::Error);
}

TEST_CASE("counted shards are disjoint and cover every row") {
  const std::vector<std::size_t> counts = {40, 25, 30, 5};
  std::set<std::size_t> seen;
  for (int r = 0; r < 4; ++r) {
    const auto mine = dpg::data::counted_indices(100, r, counts, 7);
    CHECK(mine.size() == counts[static_cast<std::size_t>(r)]);
    for (auto i : mine) CHECK(seen.insert(i).second);
  }
  CHECK(seen.size() == 100);
  CHECK(dpg::data::counted_indices(100, 1, counts, 7) ==
        dpg::data::counted_indices(100, 1, counts, 7));
  CHECK_THROWS_AS(dpg::data::counted_indices(99, 0, counts, 7), dpg::Error);
  CHECK_THROWS_AS(dpg::data::counted_indices(100, 4, counts, 7), dpg::Error);
}

TEST_CASE("the calibration work is stretched by the peer's slowdown") {
  dpg::TrainConfig c;
  dpg::model::MlpSpec spec;
  spec.inputs = 64;
  spec.hidden = {32};
  spec.classes = 10;
  const dpg::train::Straggler slow({dpg::train::parse_slowdown("0:3")}, 0, 1.0);
  dpg::train::SpeedProbe plain(c, spec, 256, nullptr), stretched(c, spec, 256, &slow);
  double p = 1e9, s = 1e9;
  for (int i = 0; i < 5; ++i) {
    p = std::min(p, plain.pass());
    s = std::min(s, stretched.pass());
  }
  // The stretched pass pauses twice its own work after it (a sleep is never shorter than
  // asked): about 3x the plain pass, here with room for the two passes' own spread.
  CHECK(s >= 2.5 * p);
}

TEST_CASE("rows re-sharded at an epoch's start: the run goes on at the plan's rate") {
  // Three peers of 400 rows each; at the start of epoch 2 the hook hands rank 0 600 rows and
  // the others 300 (the same 1200 in all, as the balancer's re-shard keeps them). Every peer
  // finishes its steps, the hook runs once per peer at that epoch's first step, and the
  // epsilons are the plan's, as without the re-shard.
  for (dpg::Algo algo : {dpg::Algo::allreduce, dpg::Algo::ps_async}) {
    CAPTURE(dpg::to_string(algo));
    dpg::TrainConfig c = dpg::test::small_config(algo);
    const std::vector<dpg::train::GossipPhase> phases;
    const auto plain = dpg::test::run_peers(3, c, 400, phases);
    std::vector<std::vector<long long>> calls(3);
    const auto moved = dpg::test::run_peers(
        3, c, 400, phases, std::chrono::seconds(20), {},
        [&](int r, dpg::train::RunInputs& in) {
          in.hooks.rebalance = [&calls, r](int epoch,
                                           long long step) -> std::optional<dpg::data::Dataset> {
            calls[static_cast<std::size_t>(r)].push_back(epoch * 1000000 + step);
            if (epoch != 2) return std::nullopt;
            return dpg::test::blobs(r == 0 ? 600 : 300, 500 + static_cast<std::uint64_t>(r));
          };
        });
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      const auto& p = moved[static_cast<std::size_t>(r)];
      REQUIRE(p.error == "");
      const auto& q = plain[static_cast<std::size_t>(r)];
      CHECK(p.summary.steps == q.summary.steps);
      CHECK(p.summary.epsilon == q.summary.epsilon);
      CHECK(p.epochs.size() == 3);
      // Called at the start of epochs 2 and 3, each at its first step (an epoch is 1 / q =
      // 1200 / 160 = 7.5 steps: epoch 2 starts at step 8, epoch 3 at step 15).
      CHECK(calls[static_cast<std::size_t>(r)] == std::vector<long long>{2000008, 3000015});
      CHECK(p.summary.test_accuracy > 0.5);
    }
  }
}

TEST_CASE("shares capped at a rate: what a capped peer cannot take goes to the others") {
  using dpg::train::cap_shares;
  const std::vector<double> rows = {1000, 1000, 2000, 1000};
  // Within the cap (rate batch x share / rows at most 0.3): unchanged.
  const std::vector<double> even = {0.25, 0.25, 0.25, 0.25};
  CHECK(cap_shares(even, rows, 1000, 0.3) == even);
  // Peer 0 asks 0.7 (a rate of 0.7); capped at 0.3 of its 1000 rows, it keeps 0.3 and the rest
  // goes to the others in proportion (0.1 : 0.1 : 0.1), which stay under their caps.
  const auto capped = cap_shares({0.7, 0.1, 0.1, 0.1}, rows, 1000, 0.3);
  CHECK(capped[0] == doctest::Approx(0.3));
  for (std::size_t j = 1; j < 4; ++j) CHECK(capped[j] == doctest::Approx(0.7 / 3));
  // Spreading may push another peer over its cap: both are held there, the rest takes the rest.
  const auto twice = cap_shares({0.5, 0.4, 0.05, 0.05}, rows, 1000, 0.3);
  CHECK(twice[0] == doctest::Approx(0.3));
  CHECK(twice[1] == doctest::Approx(0.3));
  CHECK(twice[2] == doctest::Approx(0.2));
  CHECK(twice[3] == doctest::Approx(0.2));
  double sum = 0;
  for (std::size_t j = 0; j < 4; ++j) {
    sum += twice[j];
    CHECK(1000 * twice[j] / rows[j] <= 0.3 + 1e-12);
  }
  CHECK(sum == doctest::Approx(1.0));
  // A cap that cannot hold the batch (0.1 of 5000 rows < 1000) is refused.
  CHECK_THROWS_AS(cap_shares(even, rows, 1000, 0.1), dpg::Error);
}

TEST_CASE("rates changed at an epoch's start: each peer's epsilon from its own rates") {
  // Three peers of 400 rows each sampling at the global rate (160 / 1200), the noise calibrated
  // for a cap of twice that. At the start of epoch 2 the hook gives rank 0 the cap and the others
  // less: the run goes on, each peer's epsilon is the account of its own rates (recomputed here)
  // and the model's, charged at the highest rate of each step, bounds them, within the target.
  dpg::TrainConfig c = dpg::test::small_config(dpg::Algo::gossip);
  c.noise_multiplier = 0;  // calibrated to the target, for the cap
  c.target_epsilon = 3;
  const double q = c.batch_size / 1200.0, cap = 2 * q;
  const std::vector<double> later = {cap, 0.5 * q, 0.5 * q};
  const auto peers = dpg::test::run_peers(
      3, c, 400, dpg::test::graph_phases("ring", 3), std::chrono::seconds(20), {},
      [&](int, dpg::train::RunInputs& in) {
        in.rate_cap = cap;
        in.hooks.rerate = [&](int epoch, long long) -> std::optional<std::vector<double>> {
          if (epoch != 2) return std::nullopt;
          return later;
        };
      });
  const long long starts_2 = 8;  // an epoch is 1 / q = 7.5 steps
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    const auto& p = peers[static_cast<std::size_t>(r)];
    REQUIRE(p.error == "");
    const long long steps = p.summary.steps;
    REQUIRE(p.summary.peer_epsilons.size() == 3);
    double worst = 0;
    for (std::size_t j = 0; j < 3; ++j) {
      dpg::dp::Accountant a;
      a.step(q, p.noise_multiplier, starts_2);
      a.step(later[j], p.noise_multiplier, steps - starts_2);
      CHECK(p.summary.peer_epsilons[j] == doctest::Approx(a.spent(c.delta).epsilon).epsilon(1e-12));
      worst = std::max(worst, p.summary.peer_epsilons[j]);
    }
    CHECK(p.summary.peer_epsilons[1] < p.summary.peer_epsilons[0]);
    CHECK(p.summary.epsilon >= worst - 1e-12);
    CHECK(p.summary.epsilon <= c.target_epsilon + 1e-9);
    // Calibrated for the cap: at the cap for every step the target is met, not at a higher rate.
    dpg::dp::Accountant at_cap;
    at_cap.step(cap, p.noise_multiplier, steps);
    CHECK(at_cap.spent(c.delta).epsilon <= c.target_epsilon + 1e-9);
  }
}

TEST_CASE("the shared evaluation's slices follow the shares and score the same whole") {
  using namespace dpg;
  constexpr int kWorld = 3;
  const std::vector<double> shares = {0.5, 0.3, 0.2};
  const data::Dataset rows = test::blobs(1001, 7);
  model::MlpSpec spec;
  spec.inputs = 8;
  spec.hidden = {16};
  spec.classes = 3;
  const model::Mlp m(spec, 3);
  // Alone: the whole split, the reference.
  model::Workspace ws;
  const auto whole = m.evaluate(rows.features, rows.labels, ws);
  for (const bool balanced : {false, true}) {
    CAPTURE(balanced);
    net::InprocFabric fabric(kWorld, std::chrono::seconds(10));
    std::vector<model::Mlp::Evaluation> got(kWorld);
    std::vector<std::size_t> begins(kWorld + 1);
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) {
      threads.emplace_back([&, r] {
        collective::Communicator comm(fabric.peer(r));
        const train::Evaluator e(rows, &comm, balanced ? shares : std::vector<double>{});
        model::Workspace own;
        got[static_cast<std::size_t>(r)] = e.shared(m, own);
        if (r == 0) {
          for (int k = 0; k <= kWorld; ++k) {
            begins[static_cast<std::size_t>(k)] = e.slice_begin(k, rows.rows);
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    CHECK(begins.front() == 0);
    CHECK(begins.back() == rows.rows);
    CHECK(std::is_sorted(begins.begin(), begins.end()));
    if (balanced) {  // 500.5, 300.3 and 200.2 rows, rounded at the bounds
      CHECK(begins[1] == 501);
      CHECK(begins[2] == 801);
    } else {
      CHECK(begins[1] == 333);
      CHECK(begins[2] == 667);
    }
    for (const auto& ev : got) {
      CHECK(ev.rows == whole.rows);
      CHECK(ev.correct == whole.correct);
      CHECK(ev.loss_sum == doctest::Approx(whole.loss_sum).epsilon(1e-9));
    }
  }
}
