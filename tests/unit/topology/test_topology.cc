// The validator's messages, the generators' graphs, JSON graphs and schedules.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/json_io.h"
#include "topology/generators.h"
#include "topology/schedule.h"

namespace topo = dpg::topology;
using dpg::Json;

namespace {

// The message of the dpg::Error that `f` throws; fails the test when it throws none.
std::string error_of(const std::function<void()>& f, dpg::Code code = dpg::Code::invalid_argument) {
  try {
    f();
  } catch (const dpg::Error& e) {
    CHECK(e.code() == code);
    return e.what();
  }
  FAIL("no dpg::Error thrown");
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<topo::Topology> make(const std::string& kind, int n,
                                 const std::string& weights = "metropolis", int degree = 0,
                                 std::uint64_t seed = 0) {
  return topo::make({kind, n, weights, degree, seed});
}

// Two rings of four peers, 0-3 and 4-7, with no edge between them.
Json two_rings() {
  return Json::parse(R"({"peers": 8, "edges": [[0,1],[1,2],[2,3],[3,0],[4,5],[5,6],[6,7],[7,4]]})");
}

}  // namespace

TEST_CASE("validator messages start with the name and name the offending part") {
  std::string m = error_of([] { topo::Topology("t", 2, {1.5, -0.5, -0.5, 1.5}); });
  CHECK(m.rfind("t: ", 0) == 0);
  CHECK(has(m, "entry (0, 1)"));
  m = error_of([] { topo::Topology("t", 2, {0.5, 0.4, 0.5, 0.6}); });
  CHECK(has(m, "row 0 sums to 0.9"));
  m = error_of([] { topo::Topology("t", 2, {0.5, 0.5, 0.2, 0.8}); });
  CHECK(has(m, "column 0 sums to 0.7"));
  m = error_of([] { topo::Topology("t", 2, {1, 0, 0}); });
  CHECK(has(m, "3 entries"));
  m = error_of([] { topo::Topology("t", 0, {}); });
  CHECK(has(m, "peers must be >= 1"));
  m = error_of([] { topo::Topology("t", 1, {std::nan("")}); });
  CHECK(has(m, "not finite"));
  m = error_of([] { topo::Topology("t", 2, {1, 0, 0, 1}); });
  CHECK(has(m, "disconnected: peer 0 cannot reach peer 1"));
  // A one-way link: 1 hears 0 but 0 never hears 1; not doubly stochastic either.
  m = error_of([] { topo::Topology("t", 2, {1, 0, 0.5, 0.5}); });
  CHECK(has(m, "column 0 sums to 1.5"));
  // A negative entry above -1e-12 is rounding noise, stored as 0.
  const topo::Topology t(
      "t", 3,
      {0.5 + 1e-13, 0.5 - 1e-13, 0, 0.5 - 1e-13, -1e-13, 0.5 + 2e-13, 0, 0.5 + 1e-13, 0.5 - 1e-13});
  CHECK(t.weight(1, 1) == 0.0);
}

TEST_CASE("Topology accessors: neighbourhood, degrees, symmetry") {
  const topo::Topology e = make("exponential", 8).front();
  const auto nb = e.neighbourhood(0);
  CHECK(nb.self_weight == doctest::Approx(0.25));
  CHECK(nb.recv_from == std::vector<int>{4, 6, 7});
  CHECK(nb.recv_weights == std::vector<double>{0.25, 0.25, 0.25});
  CHECK(nb.send_to == std::vector<int>{1, 2, 4});
  CHECK(e.in_degrees() == std::vector<int>(8, 3));
  CHECK(e.out_degrees() == std::vector<int>(8, 3));
  CHECK_FALSE(e.symmetric());
  const topo::Topology r = make("ring", 8).front();
  CHECK(r.symmetric());
  CHECK(r.neighbourhood(0).recv_from == std::vector<int>{1, 7});
  CHECK(r.weight(0, 1) == doctest::Approx(1.0 / 3));
  error_of([&] { r.neighbourhood(8); }, dpg::Code::out_of_range);
  error_of([&] { r.weight(-1, 0); }, dpg::Code::out_of_range);
}

TEST_CASE("small and degenerate graphs") {
  for (const auto& kind : topo::kinds()) {
    CAPTURE(kind);
    const auto p1 = make(kind, 1);
    CHECK(p1.size() == 1);
    CHECK(p1.front().matrix() == std::vector<double>{1.0});
  }
  const topo::Topology ring2 = make("ring", 2).front();
  CHECK(ring2.matrix() == std::vector<double>{0.5, 0.5, 0.5, 0.5});
  CHECK(topo::torus_shape(12) == std::pair{3, 4});
  CHECK(topo::torus_shape(7) == std::pair{1, 7});
  CHECK(topo::torus_shape(16) == std::pair{4, 4});
  CHECK(make("torus", 7).front().matrix() == make("ring", 7).front().matrix());
  // A 2 x 4 torus: the two vertical neighbours coincide, so each peer has 3.
  CHECK(make("torus", 8).front().in_degrees() == std::vector<int>(8, 3));
  CHECK(make("symmetric-exponential", 8).front().in_degrees() == std::vector<int>(8, 5));
}

TEST_CASE("bad specs: unknown kind, hypercube size, uniform weights on a star") {
  std::string m = error_of([] { make("mesh", 8); });
  CHECK(has(m, "mesh"));
  CHECK(has(m, "ring, torus, hypercube"));
  CHECK(has(m, "random-regular"));
  m = error_of([] { make("hypercube", 12); });
  CHECK(has(m, "power of two, got 12"));
  m = error_of([] { make("ring", 8, "fancy"); });
  CHECK(has(m, "metropolis, uniform, lazy"));
  error_of([] { make("ring", 0); });
  m = error_of([] { make("star", 6, "uniform"); });
  CHECK(has(m, "star: column 0"));
  CHECK(has(m, "regular"));
  const topo::Topology star = make("star", 6).front();
  CHECK(star.weight(0, 3) == doctest::Approx(1.0 / 6));
  CHECK(star.weight(3, 3) == doctest::Approx(5.0 / 6));
}

TEST_CASE("random-regular: d-regular, connected, deterministic by seed") {
  for (auto [n, d] : {std::pair{20, 3}, {12, 5}, {12, 9}, {16, 2}, {30, 4}, {7, 6}}) {
    CAPTURE(n);
    CAPTURE(d);
    const topo::Topology a = make("random-regular", n, "metropolis", d, 42).front();
    CHECK(a.in_degrees() == std::vector<int>(n, d));
    CHECK(a.symmetric());  // connected: the Topology constructor checked it
    CHECK(a.matrix() == make("random-regular", n, "metropolis", d, 42).front().matrix());
  }
  CHECK(make("random-regular", 40, "metropolis", 3, 1).front().matrix() !=
        make("random-regular", 40, "metropolis", 3, 2).front().matrix());
  CHECK(make("random-regular", 10).front().in_degrees() == std::vector<int>(10, 3));
  CHECK(make("random-regular", 9).front().in_degrees() == std::vector<int>(9, 4));
  CHECK(has(error_of([] { make("random-regular", 9, "metropolis", 3); }), "must be even"));
  CHECK(has(error_of([] { make("random-regular", 8, "metropolis", 8); }), "[1, 7]"));
  CHECK(has(error_of([] { make("random-regular", 8, "metropolis", 1); }), "never connected"));
}

// The undirected edges (i < j) of a topology, in order.
std::vector<std::pair<int, int>> edges_of(const topo::Topology& t) {
  std::vector<std::pair<int, int>> edges;
  for (int i = 0; i < t.peers(); ++i)
    for (int j : t.neighbourhood(i).recv_from)
      if (i < j) edges.emplace_back(i, j);
  return edges;
}

// Every peer builds the random graph itself from the seed, so the draw must be the same on every
// system: dpg::Rng's own bounded draw, no std:: distribution (which differ between standard
// libraries). A change of generator changes these edges.
TEST_CASE("random-regular: one seeded graph, pinned") {
  const topo::Topology t = make("random-regular", 10, "metropolis", 3, 7).front();
  // Drawn again by a separate implementation of xoshiro256** and the pairing (in Python): each
  // peer has 3 neighbours and the graph is connected (0-3-2-6-7-1-4-8-5, 2-9).
  const std::vector<std::pair<int, int>> expected = {
      {0, 3}, {0, 6}, {0, 8}, {1, 4}, {1, 5}, {1, 7}, {2, 3}, {2, 6},
      {2, 9}, {3, 9}, {4, 8}, {4, 9}, {5, 7}, {5, 8}, {6, 7}};
  CHECK(edges_of(t) == expected);
  CHECK(t.in_degrees() == std::vector<int>(10, 3));
}

TEST_CASE("from_json: edges, weights, matrices") {
  const auto ring = topo::from_json(
      Json::parse(R"({"peers": 4, "edges": [[0,1],[1,2],[2,3],[3,0]]})"), "g.json:");
  REQUIRE(ring.size() == 1);
  CHECK(ring.front().matrix() == make("ring", 4).front().matrix());
  CHECK(ring.front().name() == "g.json");

  const auto weighted =
      topo::from_json(Json::parse(R"({"peers": 3, "edges": [[0,1,0.25],[1,2,0.5]]})"), "g.json:");
  CHECK(weighted.front().weight(0, 0) == doctest::Approx(0.75));
  CHECK(weighted.front().weight(1, 1) == doctest::Approx(0.25));
  CHECK(weighted.front().weight(2, 1) == doctest::Approx(0.5));

  // Directed [i, j]: i sends to j, so j's row holds the weight.
  const auto directed = topo::from_json(
      Json::parse(R"({"peers": 3, "directed": true, "edges": [[0,1],[1,2],[2,0]]})"), "g.json:");
  CHECK(directed.front().weight(1, 0) == doctest::Approx(0.5));
  CHECK(directed.front().weight(0, 1) == 0);

  const auto lazy = topo::from_json(
      Json::parse(R"({"peers": 3, "edges": [[0,1],[1,2],[2,0]], "weights": "lazy"})"), "g.json:");
  CHECK(lazy.front().weight(0, 0) == doctest::Approx(2.0 / 3));

  const auto matrix = topo::from_json(Json::parse(R"({"matrix": [[0.5, 0.5], [0.5, 0.5]]})"), "m:");
  CHECK(matrix.front().peers() == 2);
}

TEST_CASE("from_json errors name the file and the JSON path") {
  auto message = [](const std::string& text) {
    return error_of([&] { topo::from_json(Json::parse(text), "graph.json:"); });
  };
  CHECK(has(message(R"({"peers": 8, "edges": [[0,1],[1,2],[2,3],[3,9]]})"),
            "graph.json: /edges/3/1: peer 9 out of range for 8 peers"));
  CHECK(has(message(R"({"peers": 3, "edges": [[0,1,0.5],[1,2]]})"), "graph.json: /edges/1: some"));
  CHECK(has(message(R"({"peers": 3, "edges": [[0,1],[1,0]]})"), "/edges/1: duplicate"));
  CHECK(has(message(R"({"peers": 3, "edges": [[1,1]]})"), "/edges/0: a self-loop"));
  CHECK(has(message(R"({"peers": 3, "edges": [[0,1,-2]]})"), "/edges/0/2: expected a weight"));
  CHECK(has(message(R"({"peers": 3, "edges": [[0,1,0.7],[0,2,0.7]]})"), "/edges: the weights"));
  CHECK(has(message(R"({"peers": 3, "edges": [[0,1]], "colour": 1})"), "graph.json: /colour"));
  CHECK(has(message(R"({"edges": []})"), "graph.json: /peers: missing"));
  CHECK(has(message(R"({"peers": 3, "edges": [[0,1]], "weights": "x"})"), "/weights"));
  CHECK(has(message(R"({"matrix": [[1, 0], [0]]})"), "graph.json: /matrix/1: expected a row"));
  CHECK(has(message(R"({"matrix": [[1, 0], [0, "a"]]})"), "graph.json: /matrix/1/1"));
  CHECK(has(message(R"([1, 2])"), "graph.json: expected a JSON object"));
  CHECK(has(message(R"({"rounds": []})"), "graph.json: /rounds: expected a non-empty"));
  CHECK(has(
      message(
          R"({"rounds": [{"peers": 2, "edges": [[0,1]]}, {"peers": 3, "edges": [[0,1],[1,2]]}]})"),
      "graph.json: /rounds/1: has 3 peers"));
  // Validation errors of one graph are prefixed with where it came from.
  CHECK(has(message(R"({"rounds": [{"matrix": [[0.5, 0.4], [0.5, 0.6]]}]})"),
            "graph.json: /rounds/0: row 0 sums to 0.9"));
  const std::string m = error_of([] { topo::from_json(two_rings(), "graph.json:"); });
  CHECK(has(m, "graph.json: disconnected: peer 0 cannot reach peer 4"));
}

TEST_CASE("from_json rounds: each round may be disconnected, their union may not") {
  // One-peer exponential on 4 peers: round 0 links i -> i+1, round 1 links i -> i+2.
  const Json j = Json::parse(R"({"rounds": [
      {"peers": 4, "directed": true, "edges": [[0,1],[1,2],[2,3],[3,0]]},
      {"peers": 4, "directed": true, "edges": [[0,2],[1,3],[2,0],[3,1]]}]})");
  const auto period = topo::from_json(j, "s.json:");
  REQUIRE(period.size() == 2);
  CHECK(period[1].weight(2, 0) == doctest::Approx(0.5));
  CHECK(period[1].weight(0, 2) == doctest::Approx(0.5));
  CHECK(period[0].matrix() == make("one-peer-exponential", 4)[0].matrix());

  Json rounds = {{"rounds", {two_rings(), two_rings()}}};
  const std::string m = error_of([&] { topo::from_json(rounds, "s.json:"); });
  CHECK(has(m, "s.json: /rounds: disconnected over the whole period"));

  // A few bytes per round must not ask for a dense 4096 x 4096 matrix each: 17 rounds of
  // kMaxPeers pass the period's bound and are refused before any is built.
  Json many = {{"rounds", Json::array()}};
  for (int t = 0; t < 17; ++t) many["rounds"].push_back({{"peers", 4096}, {"edges", {{t, t + 1}}}});
  const std::string big = error_of([&] { topo::from_json(many, "m.json:"); });
  CHECK(has(big, "m.json: /rounds: 17 rounds of 4096 peers would take 2176 MiB"));
  CHECK(has(big, "at most 2048 MiB (16 rounds of this size)"));
}

TEST_CASE("Schedule: phases, at, peers_of") {
  std::vector<topo::Schedule::Phase> phases;
  phases.push_back(topo::Schedule::phase(0, "ring", make("ring", 8)));
  phases.push_back(
      topo::Schedule::phase(10, "one-peer-exponential", make("one-peer-exponential", 8)));
  const topo::Schedule s(phases);
  CHECK(s.peers() == 8);
  CHECK(s.phases().size() == 2);
  CHECK(s.at(0).name() == "ring");
  CHECK(s.at(9).name() == "ring");
  CHECK(&s.at(10) == &s.phases()[1].period[0]);
  CHECK(&s.at(11) == &s.phases()[1].period[1]);
  CHECK(&s.at(12) == &s.phases()[1].period[2]);
  CHECK(&s.at(13) == &s.phases()[1].period[0]);
  CHECK(&s.at(1000000000000LL) == &s.phases()[1].period[(1000000000000LL - 10) % 3]);
  CHECK(s.phase_at(10).label == "one-peer-exponential");
  CHECK(s.phase_at(10).spectrum.rounds_1000x == 3);
  // Ring: 1 and 7; one-peer: sends to 1, 2, 4 and receives from 7, 6, 4.
  CHECK(s.peers_of(0) == std::vector<int>{1, 2, 4, 6, 7});
  CHECK(s.peers_of(5) == std::vector<int>{1, 3, 4, 6, 7});
  error_of([&] { s.at(-1); }, dpg::Code::out_of_range);

  auto rejected = [&](std::vector<topo::Schedule::Phase> p) {
    return error_of([&] { topo::Schedule{p}; });
  };
  CHECK(has(rejected({}), "no phases"));
  CHECK(has(rejected({topo::Schedule::phase(5, "ring", make("ring", 8))}), "not 0"));
  CHECK(has(rejected({phases[0], topo::Schedule::phase(0, "star", make("star", 8))}),
            "phase 1 (star) starts at round 0"));
  CHECK(has(rejected({phases[0], topo::Schedule::phase(4, "ring", make("ring", 6))}),
            "6 peers, the first phase has 8"));
  // One round of the one-peer exponential graph alone is disconnected.
  CHECK(has(rejected({topo::Schedule::phase(0, "half", {make("one-peer-exponential", 8)[1]})}),
            "disconnected"));
}

TEST_CASE("two_colouring: even rings, hypercubes and tori colour; odd cycles name an edge") {
  for (const auto& [kind, n] : std::vector<std::pair<std::string, int>>{
           {"ring", 6}, {"hypercube", 8}, {"torus", 16}}) {
    CAPTURE(kind);
    const auto adj = topo::undirected_union(topo::make({kind, n, "metropolis", 0, 0}));
    const auto two = topo::two_colouring(adj);
    REQUIRE(two.colour.size() == static_cast<std::size_t>(n));
    CHECK(two.colour[0] == 0);
    for (int u = 0; u < n; ++u) {
      for (int v : adj[static_cast<std::size_t>(u)]) {
        CHECK(two.colour[static_cast<std::size_t>(u)] != two.colour[static_cast<std::size_t>(v)]);
      }
    }
  }
  for (const auto& [kind, n] : std::vector<std::pair<std::string, int>>{
           {"ring", 5}, {"complete", 4}, {"torus", 9}}) {
    CAPTURE(kind);
    const auto adj = topo::undirected_union(topo::make({kind, n, "metropolis", 0, 0}));
    const auto two = topo::two_colouring(adj);
    CHECK(two.colour.empty());
    REQUIRE(two.odd_u >= 0);
    const auto& nu = adj[static_cast<std::size_t>(two.odd_u)];
    CHECK(std::find(nu.begin(), nu.end(), two.odd_v) != nu.end());  // an edge of the graph
  }
  // The union over the period: one-peer-exponential's rounds each link i with i + 2^t only.
  const auto period = topo::make({"one-peer-exponential", 8, "metropolis", 0, 0});
  CHECK(period.size() == 3);
  CHECK(topo::undirected_union(period)[0] == std::vector<int>{1, 2, 4, 6, 7});
}
