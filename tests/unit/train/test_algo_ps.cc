// The parameter servers on in-process peers: the shards, ps-sync against the all-reduce (the same
// minibatch SGD), ps-async's learning, its staleness bound with a slow worker, and a failing
// server surfacing as an error naming it instead of a hang.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "runtime/core/error.h"
#include "runtime/train/algorithm.h"
#include "runtime/train/ps.h"
#include "tests/unit/train/peers.h"

namespace {

using namespace dpg;

TrainConfig small_config(const std::string& algo) { return test::small_config(parse_enum<Algo>(algo)); }

}  // namespace

TEST_CASE("shard_range: contiguous, balanced within one, covering every parameter") {
  for (std::size_t n : {0u, 1u, 7u, 195u, 1000u}) {
    for (int k = 1; k <= 3; ++k) {
      std::size_t next = 0, lo = n, hi = 0;
      for (int s = 0; s < k; ++s) {
        const auto [b, e] = train::shard_range(n, k, s);
        CHECK(b == next);
        CHECK(e >= b);
        lo = std::min(lo, e - b);
        hi = std::max(hi, e - b);
        next = e;
      }
      CHECK(next == n);
      CHECK(hi - lo <= 1);
    }
  }
  CHECK(train::shard_range(7, 3, 0) == std::pair<std::size_t, std::size_t>{0, 3});
  CHECK(train::shard_range(7, 3, 2) == std::pair<std::size_t, std::size_t>{5, 7});
  CHECK_THROWS_AS(train::shard_range(7, 3, 3), Error);
}

TEST_CASE("the table has both parameter servers; more servers than peers is refused") {
  CHECK(train::algo_info(Algo::ps_sync).release == dp::Release::summed);
  CHECK_FALSE(train::algo_info(Algo::ps_sync).overlaps(TrainConfig{}));
  CHECK(train::algo_info(Algo::ps_async).release == dp::Release::own);
  CHECK(train::algo_info(Algo::ps_async).overlaps(TrainConfig{}));
  TrainConfig c = small_config("ps-sync");
  c.servers = 2;
  // A server talks to every worker, a worker to every server.
  CHECK(train::algo_info(Algo::ps_sync).peers(c, 0, 4, {}) == std::vector<int>{1, 2, 3});
  CHECK(train::algo_info(Algo::ps_sync).peers(c, 3, 4, {}) == std::vector<int>{0, 1});
  c.servers = 5;
  CHECK_THROWS_WITH_AS(train::algo_info(Algo::ps_async).peers(c, 0, 4, {}),
                       doctest::Contains("/servers"), Error);
  const auto peers = test::run_peers(4, c, 100);
  for (const auto& p : peers) CHECK(p.error.find("/servers") != std::string::npos);
  c.servers = 0;
  CHECK_THROWS_WITH_AS(validate(c), doctest::Contains("/servers"), Error);
  c.servers = 1;
  c.max_staleness = -1;
  CHECK_THROWS_WITH_AS(validate(c), doctest::Contains("/max_staleness"), Error);
}

TEST_CASE("ps-sync is the all-reduce's minibatch SGD, for 1, 2 and 3 servers") {
  TrainConfig c = small_config("allreduce");
  c.momentum = 0.9;
  c.weight_decay = 1e-3;
  c.lr_schedule = LrSchedule::cosine;
  const auto ref = test::run_peers(4, c, 400);
  for (const auto& p : ref) REQUIRE(p.error == "");
  c.algo = Algo::ps_sync;
  for (int k = 1; k <= 3; ++k) {
    CAPTURE(k);
    c.servers = k;
    const auto ps = test::run_peers(4, c, 400);
    for (const auto& p : ps) REQUIRE(p.error == "");
    for (const auto& p : ps) CHECK(p.params == ps[0].params);  // every replica the same
    // The sums' order differs (rank order here, the all-reduce's tree there): float rounding.
    REQUIRE(ps[0].params.size() == ref[0].params.size());
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < ps[0].params.size(); ++i) {
      diff = std::max(diff, std::abs(double(ps[0].params[i]) - ref[0].params[i]));
      norm = std::max(norm, std::abs(double(ref[0].params[i])));
    }
    CHECK(diff <= 1e-5 * norm);
    CHECK(ps[0].summary.test_accuracy == doctest::Approx(ref[0].summary.test_accuracy).epsilon(0.01));
    CHECK(ps[0].summary.epsilon == ref[0].summary.epsilon);
  }
}

TEST_CASE("ps-async with 2 servers learns the blobs and reports its staleness") {
  TrainConfig c = small_config("ps-async");
  c.servers = 2;
  c.lr = 0.3;
  const auto peers = test::run_peers(4, c, 400);
  for (const auto& p : peers) REQUIRE(p.error == "");
  for (const auto& p : peers) {
    CHECK(p.summary.test_accuracy > 0.8);
    CHECK(p.summary.extra["staleness_max"].get<long long>() <= c.max_staleness);
    CHECK(p.epochs.back().extra.contains("staleness_mean"));
  }
  // Every peer evaluates the servers' model.
  CHECK(peers[0].summary.test_accuracy == peers[3].summary.test_accuracy);
  REQUIRE(peers[0].summary.peer_epsilons.size() == 4);
}

TEST_CASE("ps-async: a slow worker holds the others within max_staleness, and the run finishes") {
  for (int bound : {0, 2}) {
    CAPTURE(bound);
    TrainConfig c = small_config("ps-async");
    c.servers = 2;
    c.lr = 0.3;
    c.epochs = 2;
    c.max_staleness = bound;
    const auto peers = test::run_peers(4, c, 400, {}, std::chrono::seconds(20),
                                       [](int rank, long long) {
                                         if (rank == 3) {
                                           std::this_thread::sleep_for(std::chrono::milliseconds(5));
                                         }
                                       });
    for (const auto& p : peers) REQUIRE(p.error == "");
    long long seen = 0;
    for (const auto& p : peers) {
      const long long m = p.summary.extra["staleness_max"].get<long long>();
      CHECK(m <= bound);
      seen = std::max(seen, m);
      for (const auto& e : p.epochs) CHECK(e.extra["staleness_max"].get<long long>() <= bound);
    }
    if (bound > 0) CHECK(seen > 0);  // the fast workers did run ahead
  }
}

TEST_CASE("ps-async: a server that fails mid-run makes the others fail naming it, not hang") {
  TrainConfig c = small_config("ps-async");
  c.servers = 2;
  c.lr = 0.3;
  // The workers blocked on server 1 are alive and waiting: the other server holds its replies
  // and its responders' waits on them go on until their own waits fail naming peer 1.
  const auto timeout = std::chrono::milliseconds(4000);
  const auto start = std::chrono::steady_clock::now();
  const auto peers = test::run_peers(4, c, 400, {}, timeout, [](int rank, long long t) {
    if (rank == 1 && t == 5) fail(Code::internal, "rank 1: injected failure at step 5");
  });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(peers[1].error.find("injected") != std::string::npos);
  // Its own failure poisoned its transport: the buffers of what it had posted (gone with its
  // trainer) are never written by a reply that comes later.
  CAPTURE(peers[1].transport_after);
  CHECK(peers[1].transport_after.find(
            "failed: stopped on an error of its own: injected failure at step 5") !=
        std::string::npos);
  for (int r : {0, 2, 3}) {
    CAPTURE(peers[static_cast<std::size_t>(r)].error);
    CHECK(peers[static_cast<std::size_t>(r)].error.find("peer 1") != std::string::npos);
  }
  CHECK(took < 3 * std::chrono::duration<double>(timeout).count());
}

TEST_CASE("ps-async: a worker that hangs is named by the servers, whose held workers then fail") {
  TrainConfig c = small_config("ps-async");
  c.servers = 2;
  c.max_staleness = 1;
  const auto timeout = std::chrono::milliseconds(1000);
  const auto start = std::chrono::steady_clock::now();
  const auto peers = test::run_peers(4, c, 400, {}, timeout, [&](int rank, long long t) {
    if (rank == 3 && t == 4) std::this_thread::sleep_for(3 * timeout);  // busy, not waiting
  });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int r : {0, 1, 2}) {
    CAPTURE(peers[static_cast<std::size_t>(r)].error);
    // Directly, or quoted in the failure of the server it waited on.
    CHECK(peers[static_cast<std::size_t>(r)].error.find("peer 3 is alive but not waiting") !=
          std::string::npos);
  }
  CHECK(took < 6 * std::chrono::duration<double>(timeout).count());
}
