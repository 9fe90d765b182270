// The partial all-reduce on in-process peers: the group generator's order and patience, the mean
// kept and the spread shrinking under random delays (no deadlock with the trainer's collectives
// between steps), a slow peer stalling nobody, learning with DP, a bad group size refused, and a
// peer failing mid-run named by the others.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "runtime/core/error.h"
#include "runtime/train/algorithm.h"
#include "runtime/train/groups.h"
#include "tests/unit/train/peers.h"

namespace {

using namespace dpg;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TrainConfig partial_config() {
  TrainConfig c = test::small_config(Algo::partial_allreduce);
  c.group_size = 2;
  return c;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

TEST_CASE("partial-allreduce: in the table, with each peer's own noise, talking to every peer") {
  const auto& info = train::algo_info(Algo::partial_allreduce);
  CHECK(info.release == dp::Release::own);
  CHECK(info.asynchronous);
  CHECK_FALSE(info.uses_graph);
  CHECK(info.peers(partial_config(), 2, 4, {}) == std::vector<int>{0, 1, 3});
}

TEST_CASE("group generator: the first group_size ready form a group, in the order they asked") {
  train::GroupGenerator g(4, 2, std::chrono::seconds(10));
  std::vector<train::Group> got(4);
  std::vector<std::thread> ts;
  for (int p : {3, 1}) {
    ts.emplace_back([&, p] { got[static_cast<std::size_t>(p)] = g.join(p, [] {}); });
    std::this_thread::sleep_for(milliseconds(30));  // 3 asks before 1
  }
  for (auto& t : ts) t.join();
  CHECK(got[3].members == std::vector<int>{1, 3});
  CHECK(got[1].members == got[3].members);
  CHECK(got[1].id == got[3].id);
  CHECK(g.groups_formed() == 1);
}

TEST_CASE("group generator: a peer nobody joins goes alone after the patience") {
  train::GroupGenerator g(3, 3, milliseconds(80));
  const auto start = Clock::now();
  const train::Group a = g.join(2, [] {});
  const double waited = seconds_since(start);
  CHECK(a.members == std::vector<int>{2});
  CHECK(waited >= 0.075);
  CHECK(waited < 2.0);
  // Two waiting together past the patience go as a pair, not as two lone peers.
  std::vector<train::Group> got(3);
  std::thread t0([&] { got[0] = g.join(0, [] {}); });
  std::thread t1([&] { got[1] = g.join(1, [] {}); });
  t0.join();
  t1.join();
  CHECK(got[0].members == std::vector<int>{0, 1});
  CHECK(got[1].id == got[0].id);
}

TEST_CASE("group generator: a check that throws takes the peer out of the queue") {
  train::GroupGenerator g(3, 2, std::chrono::seconds(10));
  CHECK_THROWS_WITH_AS(g.join(1, [] { throw Error(Code::aborted, "given up"); }), "given up",
                       Error);
  // Peer 1 is not waiting any more: 0 and 2 form the next group.
  std::vector<train::Group> got(3);
  std::thread t0([&] { got[0] = g.join(0, [] {}); });
  std::thread t2([&] { got[2] = g.join(2, [] {}); });
  t0.join();
  t2.join();
  CHECK(got[0].members == std::vector<int>{0, 2});
}

TEST_CASE("group generator: group sizes outside 2..world are refused") {
  CHECK_THROWS_WITH_AS(train::GroupGenerator(4, 5, milliseconds(1)),
                       doctest::Contains("group_size: 5, but the run has 4 peers (need 2 to 4)"),
                       Error);
  CHECK_THROWS_AS(train::GroupGenerator(4, 1, milliseconds(1)), Error);
}

TEST_CASE("partial-allreduce: a group size above the peers is refused on every peer") {
  TrainConfig c = partial_config();
  c.group_size = 5;
  for (const auto& p : test::run_peers(4, c, 200)) {
    CHECK(p.error.find("/group_size: 5 peers a group, but the run has 4 peers") !=
          std::string::npos);
  }
}

TEST_CASE("partial-allreduce: random delays, no deadlock; the mean is kept, the spread shrinks") {
  for (const int group : {2, 3}) {
    CAPTURE(group);
    TrainConfig c = partial_config();
    c.group_size = group;
    c.lr = 0;  // the models only mix
    c.dp = false;
    c.init = Init::independent;
    c.epochs = 4;
    c.metrics_every = 3;  // K-step consensus reports: collectives between steps
    const auto sleepy = test::random_delays(42, 5000);
    const int world = 5;
    const auto peers = test::run_peers(world, c, 400, {}, std::chrono::seconds(20), sleepy);
    for (const auto& p : peers) REQUIRE(p.error == "");
    // init independent: peer r starts from seed + r; with lr 0 the sum of the models stays.
    std::vector<double> sum(peers[0].params.size(), 0.0);
    for (const auto& p : peers) {
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += p.params[i];
    }
    double spread = 0, first = 0;
    for (const auto& p : peers) {
      for (std::size_t i = 0; i < sum.size(); ++i) {
        const double d = p.params[i] - sum[i] / world;
        spread += d * d;
      }
    }
    first = peers[0].epochs.front().consensus_distance;
    const double last = peers[0].epochs.back().consensus_distance;
    CHECK(last < 0.5 * first);
    CHECK(spread / world < 1.0);
    long long groups = 0, lone = 0;
    for (const auto& p : peers) {
      CHECK(p.summary.extra["groups"].get<long long>() == p.summary.steps);
      groups += p.summary.extra["groups"].get<long long>();
      lone += p.summary.extra["lone_steps"].get<long long>();
    }
    CHECK(lone < groups / 2);  // most steps were averaged with someone
    CHECK(peers[0].summary.extra["groups_formed"].get<long long>() > 0);
  }
}

TEST_CASE("partial-allreduce: the mean of the models is kept to float rounding") {
  TrainConfig c = partial_config();
  c.lr = 0;
  c.dp = false;
  c.init = Init::independent;
  c.epochs = 2;
  std::vector<std::vector<float>> before(4);
  const auto keep = [&](int rank, train::RunInputs& in) {
    in.hooks.step = [&before, rank](long long s, std::span<const float> x) {
      if (s == 0) before[static_cast<std::size_t>(rank)].assign(x.begin(), x.end());
    };
  };
  const auto peers = test::run_peers(4, c, 400, {}, std::chrono::seconds(20), {}, keep);
  for (const auto& p : peers) REQUIRE(p.error == "");
  double worst = 0;
  for (std::size_t i = 0; i < peers[0].params.size(); ++i) {
    double m0 = 0, m1 = 0;
    for (int r = 0; r < 4; ++r) {
      m0 += before[static_cast<std::size_t>(r)][i];
      m1 += peers[static_cast<std::size_t>(r)].params[i];
    }
    worst = std::max(worst, std::abs(m0 - m1) / 4);
  }
  CHECK(worst < 1e-5);
}

TEST_CASE("partial-allreduce: a slow peer does not stall the others") {
  TrainConfig c = partial_config();
  c.epochs = 1;  // one evaluation (a collective) only, after the last step
  c.batch_size = 40;
  const long long steps = 40;  // 4 peers of 400 rows at batch 40
  std::vector<double> done_s(4, 0.0);
  const auto start = Clock::now();
  const auto hook = [&](int rank, long long t) {
    if (rank == 3) std::this_thread::sleep_for(milliseconds(25));
    if (t == steps - 1) done_s[static_cast<std::size_t>(rank)] = seconds_since(start);
  };
  const auto peers = test::run_peers(4, c, 400, {}, std::chrono::seconds(20), hook);
  for (const auto& p : peers) REQUIRE(p.error == "");
  REQUIRE(peers[0].summary.steps == steps);
  CHECK(done_s[3] >= 1.0);
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(done_s[static_cast<std::size_t>(r)] > 0);
    CHECK(done_s[static_cast<std::size_t>(r)] < 0.5 * done_s[3]);
  }
}

TEST_CASE("partial-allreduce: learns the blobs with DP at 4 peers") {
  const auto peers = test::run_peers(4, partial_config(), 400);
  for (const auto& p : peers) REQUIRE(p.error == "");
  const auto& s = peers[0].summary;
  CHECK(s.test_accuracy > 0.8);
  REQUIRE(s.peer_epsilons.size() == 4);
  CHECK(s.epsilon == *std::max_element(s.peer_epsilons.begin(), s.peer_epsilons.end()));
  CHECK(s.message_epsilon == s.epsilon);
  CHECK(s.extra["group_size"] == 2);
  CHECK(s.extra["rho"].is_null());
}

TEST_CASE("partial-allreduce: a peer that fails mid-run makes the others fail, naming it") {
  for (const int dead : {0, 2}) {  // the generator and a member
    CAPTURE(dead);
    const auto [peers, took] = test::run_with_one_failing(partial_config(), dead);
    CHECK(took < 15.0);
    CHECK(peers[static_cast<std::size_t>(dead)].error.find("the test stops this peer") !=
          std::string::npos);
    int naming = 0;
    for (int r = 0; r < 4; ++r) {
      if (r == dead) continue;
      CAPTURE(r);
      const std::string& e = peers[static_cast<std::size_t>(r)].error;
      CAPTURE(e);
      CHECK(e != "");
      if (e.find("peer " + std::to_string(dead)) != std::string::npos) ++naming;
    }
    CHECK(naming >= 1);
  }
}
