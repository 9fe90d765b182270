// Gossip over the in-process transport: with zero learning rate D-PSGD is plain gossip, which
// keeps the peers' average (W is doubly stochastic) and shrinks their disagreement at the rate the
// topology's rho predicts; the one-peer exponential graph averages exactly in log2(n) rounds.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "runtime/collective/communicator.h"
#include "runtime/collective/neighbour.h"
#include "runtime/core/error.h"
#include "runtime/core/rng.h"
#include "runtime/net/inproc/inproc_transport.h"
#include "runtime/train/gossip.h"
#include "tests/unit/collective/world.h"
#include "topology/generators.h"

namespace {

using namespace dpg;

using test::run_transports;

std::vector<float> random_model(int rank, std::size_t count) {
  Rng rng(77 + rank);
  std::vector<float> x(count);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  return x;
}

std::vector<train::GossipPhase> one_phase(const std::string& kind, int n) {
  topology::GraphSpec spec;
  spec.kind = kind;
  spec.peers = n;
  return {topology::Schedule::phase(0, kind, topology::make(spec))};
}

struct Trace {
  std::vector<double> distance;     // consensus distance after each round, from round 0
  std::vector<float> mean_before;   // the average of the peers' models before and after
  std::vector<float> mean_after;
  double rho = 0;
};

// `rounds` rounds of gossip with lr 0 (mixing only), chunks of `chunk_bytes`.
Trace gossip(const std::string& kind, int n, int rounds, std::size_t count,
             std::size_t chunk_bytes) {
  Trace trace;
  std::vector<std::vector<double>> dist(n);
  run_transports(n, [&](int rank, net::Transport& t) {
    collective::Communicator comm(t);
    train::Gossip g(t, train::make_schedule(one_phase(kind, n), 1.0), count, chunk_bytes);
    std::vector<float> x = random_model(rank, count), mean;
    dist[rank].push_back(train::consensus_distance(comm, x, mean));
    if (rank == 0) trace.mean_before = mean;
    for (int r = 0; r < rounds; ++r) {
      g.begin(r, public_model(std::span<const float>(x)));
      g.end(x);
      dist[rank].push_back(train::consensus_distance(comm, x, mean));
    }
    if (rank == 0) {
      trace.mean_after = mean;
      trace.rho = g.schedule().phases()[0].spectrum.rho;
    }
  });
  for (int r = 1; r < n; ++r) CHECK(dist[r] == dist[0]);  // every peer computes the same figure
  trace.distance = dist[0];
  return trace;
}

}  // namespace

TEST_CASE("gossip with zero learning rate keeps the average and shrinks disagreement as rho^t") {
  for (const char* kind : {"ring", "torus", "exponential", "symmetric-exponential", "hypercube"}) {
    for (int n : {4, 8, 16}) {
      CAPTURE(kind);
      CAPTURE(n);
      const int rounds = 30;
      const Trace t = gossip(kind, n, rounds, 1001, 64);  // 16 chunks, the last one short
      for (std::size_t i = 0; i < t.mean_before.size(); ++i) {
        REQUIRE(std::abs(t.mean_after[i] - t.mean_before[i]) < 2e-6);
      }
      REQUIRE(t.distance[0] > 0.5);
      const double rho2 = t.rho * t.rho;
      for (int r = 1; r <= rounds; ++r) {
        // Never slower than the bound rho^(2t) (a squared norm)...
        REQUIRE(t.distance[r] <= std::pow(rho2, r) * t.distance[0] * (1 + 1e-3) + 1e-12);
      }
      // ...and once the slowest mode dominates, exactly that fast (when the spread is still
      // far above float precision).
      if (t.distance[rounds] > 1e-9 * t.distance[0]) {
        const double ratio = t.distance[rounds] / t.distance[rounds - 1];
        CHECK(ratio == doctest::Approx(rho2).epsilon(0.02));
      }
    }
  }
}

TEST_CASE("the ring's measured decay matches the closed form rho = 1/3 + 2/3 cos(2 pi / n)") {
  const int n = 9;
  const Trace t = gossip("ring", n, 60, 257, 256 * 1024);
  const double rho = 1.0 / 3 + 2.0 / 3 * std::cos(2 * M_PI / n);
  CHECK(t.rho == doctest::Approx(rho).epsilon(1e-9));
  CHECK(t.distance[60] / t.distance[59] == doctest::Approx(rho * rho).epsilon(0.01));
}

TEST_CASE("one-peer exponential gossip averages exactly in log2(n) rounds") {
  for (int n : {8, 16}) {
    CAPTURE(n);
    const int log2n = n == 8 ? 3 : 4;
    const Trace t = gossip("one-peer-exponential", n, log2n, 300, 100);
    CHECK(t.distance[log2n - 1] > 1e-3);          // not yet one round early
    CHECK(t.distance[log2n] < 1e-10 * t.distance[0]);  // float precision after log2(n)
  }
}

TEST_CASE("a topology of another size than the world is refused") {
  CHECK_THROWS_WITH_AS(
      run_transports(4, [](int, net::Transport& t) {
        train::Gossip g(t, train::make_schedule(one_phase("ring", 5), 1.0), 10);
      }),
      doctest::Contains("5 peers but the run has 4"), Error);
}

TEST_CASE("a schedule switches graphs at the round an epoch boundary falls on") {
  auto phases = one_phase("ring", 8);
  auto later = one_phase("exponential", 8)[0];
  later.when.at = 2;        // epochs
  later.when.in_epochs = true;
  phases.push_back(later);
  const auto s = train::make_schedule(phases, 14.65);  // ceil(2 * 14.65) = 30
  CHECK(s.phase_at(29).label == "ring");
  CHECK(s.phase_at(30).label == "exponential");
  CHECK(s.phases()[1].spectrum.rho < s.phases()[0].spectrum.rho);

  auto earlier = one_phase("ring", 8)[0];  // epoch 1 after epoch 2: refused, naming the phase
  earlier.when.at = 1;
  earlier.when.in_epochs = true;
  phases.push_back(earlier);
  CHECK_THROWS_WITH_AS(train::make_schedule(phases, 14.65),
                       doctest::Contains("phase 2 (ring) starts at round 15"), Error);
}

TEST_CASE("the neighbour exchange holds a fixed window of chunks, whatever the model's size") {
  // 4 peers on a ring, each receiving from both neighbours: 10,007 floats in chunks of 16 floats
  // (626 chunks) through a window of 3 per neighbour. The mix equals the closed form computed
  // from every peer's model, and the buffers stay 2 x 3 x 16 floats.
  const int n = 4;
  const std::size_t count = 10007, chunk_bytes = 64, window = 3;
  std::vector<std::vector<float>> models(n), mixed(n);
  for (int r = 0; r < n; ++r) models[r] = random_model(r, count);
  std::vector<std::size_t> buffered(n);
  run_transports(n, [&](int rank, net::Transport& t) {
    collective::NeighbourExchange ex(t, chunk_bytes, window);
    const int left = (rank + n - 1) % n, right = (rank + 1) % n;
    const std::vector<int> peers = {left, right};
    const std::vector<float> w = {0.25f, 0.25f};
    std::vector<float> out(count);
    for (int round = 0; round < 2; ++round) {  // twice: the slots are reused across rounds
      ex.start(static_cast<uint64_t>(round), public_model(std::span<const float>(models[rank])), peers,
               peers);
      ex.finish([&](std::size_t b, std::size_t e, std::span<const std::span<const float>> in) {
        REQUIRE(in.size() == 2);
        collective::mix_range(out, 0.5f, models[rank], w, in, b, e);
      });
    }
    buffered[rank] = ex.buffered_floats();
    mixed[rank] = out;
  });
  for (int r = 0; r < n; ++r) {
    CHECK(buffered[r] == 2 * window * (chunk_bytes / sizeof(float)));
    const auto& l = models[(r + n - 1) % n];
    const auto& m = models[r];
    const auto& rt = models[(r + 1) % n];
    for (std::size_t i = 0; i < count; ++i) {
      float want = 0.5f * m[i];
      want += 0.25f * l[i];
      want += 0.25f * rt[i];
      REQUIRE(mixed[r][i] == want);
    }
  }
}

TEST_CASE("the neighbour exchange sends a model handed over piece by piece only as it is ready") {
  // Each peer's buffer holds NaN when the exchange starts with nothing ready; the model is then
  // written in uneven pieces, each followed by ready(). A chunk sent before its values were in
  // place would carry NaN into the neighbours' mix. finish() sends what was never declared.
  const int n = 3;
  const std::size_t count = 1001, chunk_bytes = 64;
  std::vector<std::vector<float>> models(n), mixed(n);
  for (int r = 0; r < n; ++r) models[r] = random_model(r, count);
  run_transports(n, [&](int rank, net::Transport& t) {
    collective::NeighbourExchange ex(t, chunk_bytes, 2);
    const std::vector<int> peers = {(rank + n - 1) % n, (rank + 1) % n};
    const std::vector<float> w = {0.25f, 0.25f};
    std::vector<float> mine(count, std::numeric_limits<float>::quiet_NaN()), out(count);
    ex.start(5, public_model(std::span<const float>(mine)), peers, peers, 0);
    std::size_t done = 0;
    for (const std::size_t piece : {7, 100, 33, 500}) {
      std::copy_n(models[rank].begin() + static_cast<long>(done), piece,
                  mine.begin() + static_cast<long>(done));
      done += piece;
      ex.ready(done);
    }
    std::copy(models[rank].begin() + static_cast<long>(done), models[rank].end(),
              mine.begin() + static_cast<long>(done));
    ex.finish([&](std::size_t b, std::size_t e, std::span<const std::span<const float>> in) {
      collective::mix_range(out, 0.5f, mine, w, in, b, e);
    });
    mixed[rank] = out;
  });
  for (int r = 0; r < n; ++r) {
    const auto& l = models[(r + n - 1) % n];
    const auto& rt = models[(r + 1) % n];
    for (std::size_t i = 0; i < count; ++i) {
      float want = 0.5f * models[r][i];
      want += 0.25f * l[i];
      want += 0.25f * rt[i];
      REQUIRE(mixed[r][i] == want);
    }
  }
}
