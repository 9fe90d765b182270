// The algorithm interface through the whole Trainer, on in-process peers: the table, the privacy
// plan each algorithm gets, and the replicas' agreement that each algorithm promises.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "runtime/core/error.h"
#include "runtime/train/algorithm.h"
#include "tests/unit/train/peers.h"
#include "topology/generators.h"

namespace {

using namespace dpg;

TrainConfig small_config(const std::string& algo) { return test::small_config(parse_enum<Algo>(algo)); }

std::vector<train::GossipPhase> ring_phases(int world) { return test::graph_phases("ring", world); }

}  // namespace

TEST_CASE("every algorithm of the config has its line in the table") {
  for (const std::string_view name : EnumNames<Algo>::names) {
    const Algo a = parse_enum<Algo>(name);
    CHECK(train::algo_info(a).algo == a);
  }
  CHECK(train::algo_info(Algo::gossip).release == dp::Release::own);
  CHECK(train::algo_info(Algo::allreduce).release == dp::Release::summed);
}

TEST_CASE("all-reduce: every replica ends bit for bit equal, and learns") {
  const auto peers = test::run_peers(4, small_config("allreduce"), 400);
  for (const auto& p : peers) REQUIRE(p.error == "");
  for (const auto& p : peers) CHECK(p.params == peers[0].params);
  CHECK(peers[0].summary.test_accuracy > 0.8);
  CHECK(peers[0].summary.peer_epsilons.empty());
  // Distributed noise: the model's epsilon is below one peer's messages'.
  CHECK(peers[0].summary.epsilon < peers[0].summary.message_epsilon);
}

TEST_CASE("gossip: the replicas differ, every epoch line and the summary agree on epsilon") {
  const auto peers = test::run_peers(4, small_config("gossip"), 400, ring_phases(4));
  for (const auto& p : peers) REQUIRE(p.error == "");
  CHECK(peers[0].params != peers[1].params);
  const auto& s = peers[0].summary;
  CHECK(s.test_accuracy > 0.8);
  REQUIRE(s.peer_epsilons.size() == 4);
  CHECK(s.epsilon == *std::max_element(s.peer_epsilons.begin(), s.peer_epsilons.end()));
  CHECK(s.message_epsilon == s.epsilon);  // local noise: the messages are the models
  // The last epoch line reports what the summary reports (both from the plan's accountant).
  CHECK(peers[0].epochs.back().epsilon == s.epsilon);
  CHECK(peers[0].epochs.back().consensus_distance > 0);
  CHECK(peers[0].epochs.back().peer_test_accuracy.size() == 4);
  CHECK(s.extra["topology"] == "ring");
}

TEST_CASE("the noise multiplier is searched for once, and every peer holds the search's result") {
  TrainConfig c = test::small_config(Algo::gossip);
  c.epochs = 1;
  c.noise_multiplier = 0;
  c.target_epsilon = 3;
  const auto phases = test::graph_phases("ring", 3);
  auto res = test::run_peers(3, c, 400, phases, std::chrono::seconds(20));
  for (const auto& p : res) REQUIRE(p.error == "");
  std::vector<double> sigma;
  for (const auto& p : res) sigma.push_back(p.noise_multiplier);
  // Every peer holds the multiplier one search gives, and spends at most the target with it.
  dp::PlanInputs in;
  in.release = dp::Release::own;
  in.shard_rows = {400, 400, 400};
  in.batch_size = c.batch_size;
  in.epochs = c.epochs;
  in.target_epsilon = 3;
  in.delta = c.delta;
  const double searched = dp::plan_privacy(in).sigma;
  for (int r = 0; r < 3; ++r) {
    CHECK(sigma[r] == searched);
    CHECK(res[r].summary.epsilon <= 3.0);
    CHECK(res[r].summary.epsilon > 2.9);
  }
  // A peer's check of another's multiplier: dp::plan_with_multiplier_from (unit_dp_privacy_plan).
}

TEST_CASE("virtual batches: every algorithm trains with --physical-batch, as in one pass") {
  // The synchronous algorithms (the all-reduce streaming its gradient in buckets, too) end at
  // the one-pass run's model up to float summation order, whose differences the steps carry on;
  // the asynchronous ones, whose order is the peers' timing, learn as well.
  for (const std::string_view name : EnumNames<Algo>::names) {
    CAPTURE(name);
    TrainConfig c = small_config(std::string(name));
    if (c.algo == Algo::single) continue;  // one peer: the same step as allreduce among one
    const bool graph = train::algo_info(c.algo).uses_graph;
    const bool synchronous = c.algo == Algo::allreduce || c.algo == Algo::gossip ||
                       c.algo == Algo::local_sgd || c.algo == Algo::ps_sync;
    auto run = [&](long long physical, long long bucket) {
      c.physical_batch = physical;
      c.bucket_bytes = c.algo == Algo::allreduce ? bucket : 0;
      return test::run_peers(2, c, 400, graph ? ring_phases(2) : std::vector<train::GossipPhase>{});
    };
    for (long long bucket : c.algo == Algo::allreduce ? std::vector<long long>{0, 256}
                                                      : std::vector<long long>{0}) {
      const auto pieces = run(13, bucket);
      for (const auto& p : pieces) REQUIRE(p.error == "");
      CHECK(pieces[0].summary.test_accuracy > 0.8);
      if (!synchronous) continue;
      const auto whole = run(0, bucket);
      for (std::size_t r = 0; r < whole.size(); ++r) {
        CHECK(test::max_abs_diff(pieces[r].params, whole[r].params) <=
              1e-3 * test::max_abs(whole[r].params));
      }
    }
  }
}

TEST_CASE("a peer whose lines nobody reads leaves their epsilons out, unless its ledger keeps them") {
  // Gossip on a ring of 3 with consensus lines every 2 steps; only rank 0's lines are read.
  // The others' epoch and consensus lines and summaries carry no accountant figure (NaN), and
  // the meetings still happen (every peer gets every line).
  TrainConfig c = small_config("gossip");
  c.metrics_every = 2;
  const auto peers = test::run_peers(3, c, 400, ring_phases(3), std::chrono::seconds(20), {},
                                     [](int r, train::RunInputs& in) { in.reports_read = r == 0; });
  const auto& lead = peers[0];
  REQUIRE(lead.error == "");
  REQUIRE(lead.epochs.size() == 3);
  REQUIRE(lead.consensus.size() > 3);
  for (const auto& e : lead.epochs) CHECK(std::isfinite(e.epsilon));
  for (const auto& r : lead.consensus) CHECK(std::isfinite(r.epsilon));
  CHECK(lead.epochs.back().epsilon == lead.summary.epsilon);
  for (int r = 1; r < 3; ++r) {
    CAPTURE(r);
    const auto& p = peers[static_cast<std::size_t>(r)];
    REQUIRE(p.error == "");
    REQUIRE(p.epochs.size() == lead.epochs.size());
    REQUIRE(p.consensus.size() == lead.consensus.size());
    for (const auto& e : p.epochs) CHECK(std::isnan(e.epsilon));
    for (const auto& x : p.consensus) {
      CHECK(std::isnan(x.epsilon));
      CHECK(std::isnan(x.message_epsilon));
    }
    CHECK(p.consensus.back().consensus_distance == lead.consensus.back().consensus_distance);
    CHECK(std::isnan(p.summary.epsilon));
    CHECK(std::isnan(p.summary.message_epsilon));
    CHECK(p.summary.peer_epsilons.empty());
    CHECK(p.summary.steps == lead.summary.steps);
  }
  CHECK(std::isfinite(lead.summary.epsilon));
  CHECK(lead.summary.peer_epsilons.size() == 3);
}
