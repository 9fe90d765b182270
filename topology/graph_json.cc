// from_json: graphs and time-varying schedules read from JSON, each error naming its JSON path.
#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "runtime/core/error.h"
#include "topology/generators.h"

namespace dpg::topology {
namespace {

// Where a JSON value sits, for messages: "graph.json: /edges/3", or "graph.json" for the root.
class Place {
 public:
  Place(std::string file, std::string pointer)
      : file_(std::move(file)), pointer_(std::move(pointer)) {}
  Place operator/(const std::string& key) const { return {file_, pointer_ + "/" + key}; }
  Place operator/(std::size_t index) const { return *this / std::to_string(index); }
  std::string str() const {
    if (pointer_.empty()) return file_.empty() ? "graph" : file_;
    return file_.empty() ? pointer_ : file_ + ": " + pointer_;
  }
  [[noreturn]] void fail(const std::string& what) const {
    dpg::fail(Code::invalid_argument, str() + ": " + what);
  }

 private:
  std::string file_;
  std::string pointer_;
};

std::string num(double v) {
  std::ostringstream os;
  os.precision(12);
  os << v;
  return os.str();
}

void reject_unknown(const Json& g, const Place& at, std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : g.items())
    if (std::find(known.begin(), known.end(), key) == known.end())
      (at / key).fail(
          "unknown field (expected one of peers, edges, directed, weights, matrix, "
          "rounds)");
}

int peer_index(const Json& v, int n, const Place& at) {
  if (!v.is_number_integer()) at.fail("expected a peer index, got " + quote(v));
  const long long p = v.get<long long>();
  if (p < 0 || p >= n)
    at.fail("peer " + std::to_string(p) + " out of range for " + std::to_string(n) + " peers");
  return static_cast<int>(p);
}

Topology from_matrix(const Json& g, const Place& at, Connectivity connectivity) {
  reject_unknown(g, at, {"matrix", "peers"});
  const Json& m = g.at("matrix");
  if (!m.is_array() || m.empty()) (at / "matrix").fail("expected a non-empty array of rows");
  if (m.size() > static_cast<std::size_t>(kMaxPeers))
    (at / "matrix").fail("more than " + std::to_string(kMaxPeers) + " peers");
  const int n = static_cast<int>(m.size());
  if (g.contains("peers") && g.at("peers") != Json(n))
    (at / "peers")
        .fail("is " + quote(g.at("peers")) + " but the matrix has " + std::to_string(n) + " rows");
  std::vector<double> w;
  w.reserve(static_cast<std::size_t>(n) * n);
  for (std::size_t i = 0; i < m.size(); ++i) {
    const Json& row = m[i];
    if (!row.is_array() || row.size() != m.size())
      (at / "matrix" / i)
          .fail("expected a row of " + std::to_string(n) + " numbers (a square matrix), got " +
                quote(row));
    for (std::size_t j = 0; j < row.size(); ++j) {
      if (!row[j].is_number())
        (at / "matrix" / i / j).fail("expected a number, got " + quote(row[j]));
      w.push_back(row[j].get<double>());
    }
  }
  return Topology(at.str(), n, std::move(w), connectivity);
}

struct Edge {
  int from = 0, to = 0;
  double weight = 0;  // 0: no weight given
};

std::vector<Edge> read_edges(const Json& edges, int n, bool directed, const Place& at) {
  if (!edges.is_array()) at.fail("expected an array of [i, j] or [i, j, w]");
  std::vector<Edge> out;
  std::set<std::pair<int, int>> seen;
  for (std::size_t k = 0; k < edges.size(); ++k) {
    const Json& e = edges[k];
    const Place here = at / k;
    if (!e.is_array() || (e.size() != 2 && e.size() != 3))
      here.fail("expected [i, j] or [i, j, w], got " + quote(e));
    Edge edge{peer_index(e[0], n, here / std::size_t{0}),
              peer_index(e[1], n, here / std::size_t{1}), 0};
    if (edge.from == edge.to)
      here.fail("a self-loop; self weights are implied (1 - the row's other weights)");
    if (e.size() == 3) {
      if (!e[2].is_number() || !std::isfinite(e[2].get<double>()) || !(e[2].get<double>() > 0))
        (here / std::size_t{2}).fail("expected a weight > 0, got " + quote(e[2]));
      edge.weight = e[2].get<double>();
    }
    if (k > 0 && (e.size() == 3) != (out.front().weight > 0))
      here.fail("some edges have weights and some do not; give a weight on every edge or none");
    const auto key = directed
                         ? std::pair{edge.from, edge.to}
                         : std::pair{std::min(edge.from, edge.to), std::max(edge.from, edge.to)};
    if (!seen.insert(key).second)
      here.fail("duplicate edge " + quote(e) + (directed ? "" : " (edges are undirected)"));
    out.push_back(edge);
  }
  return out;
}

Topology from_edges(const Json& g, const Place& at, const std::string& default_rule,
                    Connectivity connectivity) {
  reject_unknown(g, at, {"peers", "edges", "directed", "weights"});
  if (!g.contains("peers")) (at / "peers").fail("missing (the number of peers)");
  if (!g.contains("edges")) (at / "edges").fail("missing (give \"edges\" or \"matrix\")");
  const Json& pj = g.at("peers");
  if (!pj.is_number_integer() || pj.get<long long>() < 1 || pj.get<long long>() > kMaxPeers)
    (at / "peers")
        .fail("expected an integer in [1, " + std::to_string(kMaxPeers) + "], got " + quote(pj));
  const int n = pj.get<int>();
  bool directed = false;
  if (g.contains("directed")) {
    if (!g.at("directed").is_boolean())
      (at / "directed").fail("expected true or false, got " + quote(g.at("directed")));
    directed = g.at("directed").get<bool>();
  }
  std::string rule = default_rule;
  if (g.contains("weights")) {
    const Json& r = g.at("weights");
    const auto& rules = weight_rules();
    if (!r.is_string() ||
        std::find(rules.begin(), rules.end(), r.get<std::string>()) == rules.end())
      (at / "weights").fail("expected \"metropolis\", \"uniform\" or \"lazy\", got " + quote(r));
    rule = r.get<std::string>();
  }
  const std::vector<Edge> edges = read_edges(g.at("edges"), n, directed, at / "edges");
  const bool weighted = !edges.empty() && edges.front().weight > 0;
  if (weighted && g.contains("weights"))
    (at / "weights").fail("a weight rule applies only to edges without weights");
  std::vector<double> w;
  if (!weighted) {
    // adjacent[i]: the peers i receives from; a directed [i, j] means i sends to j.
    std::vector<std::vector<int>> adjacent(n);
    for (const Edge& e : edges) {
      adjacent[e.to].push_back(e.from);
      if (!directed) adjacent[e.from].push_back(e.to);
    }
    for (auto& a : adjacent) std::sort(a.begin(), a.end());
    w = mixing_weights(adjacent, directed, rule);
  } else {
    w.assign(static_cast<std::size_t>(n) * n, 0.0);
    for (const Edge& e : edges) {
      w[static_cast<std::size_t>(e.to) * n + e.from] = e.weight;
      if (!directed) w[static_cast<std::size_t>(e.from) * n + e.to] = e.weight;
    }
    for (int i = 0; i < n; ++i) {
      double off = 0;
      for (int j = 0; j < n; ++j) off += w[static_cast<std::size_t>(i) * n + j];
      if (off > 1 + kNegativeTolerance)
        (at / "edges")
            .fail("the weights peer " + std::to_string(i) + " receives sum to " + num(off) +
                  " > 1, leaving a negative self weight");
      w[static_cast<std::size_t>(i) * n + i] = std::max(0.0, 1 - off);
    }
  }
  return Topology(at.str(), n, std::move(w), connectivity);
}

Topology one_graph(const Json& g, const Place& at, const std::string& rule,
                   Connectivity connectivity) {
  if (!g.is_object()) at.fail("expected a JSON object (a graph), got " + quote(g));
  if (g.contains("rounds")) (at / "rounds").fail("rounds cannot be nested");
  if (g.contains("matrix")) return from_matrix(g, at, connectivity);
  return from_edges(g, at, rule, connectivity);
}

}  // namespace

std::vector<Topology> from_json(const Json& j, const std::string& where,
                                const std::string& weights) {
  std::string file = where;
  while (!file.empty() && (file.back() == ':' || file.back() == ' ')) file.pop_back();
  const Place root(file, "");
  if (!j.is_object()) root.fail("expected a JSON object (a graph or {\"rounds\": [...]})");
  if (!j.contains("rounds")) return {one_graph(j, root, weights, Connectivity::required)};
  for (const auto& [key, value] : j.items())
    if (key != "rounds") (root / key).fail("unknown field beside \"rounds\"");
  const Json& rounds = j.at("rounds");
  if (!rounds.is_array() || rounds.empty())
    (root / "rounds").fail("expected a non-empty array of graphs");
  // Each round becomes a dense n x n matrix: a few bytes of JSON per round ({"peers": 4096,
  // "edges": [[0, 1]]}) would otherwise ask for 128 MiB each. The period's matrices together
  // stay within kMaxPeriodEntries (2 GiB), checked from the rounds' peer counts before any is
  // built; one-peer-exponential's 12 rounds of 4096 peers fit.
  std::uint64_t largest = 0;
  for (const Json& g : rounds) {
    if (!g.is_object()) continue;  // one_graph says what is wrong with it
    const Json* n = g.contains("peers") ? &g.at("peers") : nullptr;
    if (n && n->is_number_integer() && n->get<long long>() > 0)
      largest = std::max<std::uint64_t>(largest, n->get<long long>());
    if (g.contains("matrix") && g.at("matrix").is_array())
      largest = std::max<std::uint64_t>(largest, g.at("matrix").size());
  }
  largest = std::min<std::uint64_t>(largest, kMaxPeers);
  if (rounds.size() * largest * largest > kMaxPeriodEntries)
    (root / "rounds")
        .fail(std::to_string(rounds.size()) + " rounds of " + std::to_string(largest) +
              " peers would take " + std::to_string(rounds.size() * largest * largest / 131072) +
              " MiB of mixing matrices; at most " + std::to_string(kMaxPeriodEntries / 131072) +
              " MiB (" + std::to_string(kMaxPeriodEntries / (largest * largest)) +
              " rounds of this size)");
  std::vector<Topology> period;
  for (std::size_t t = 0; t < rounds.size(); ++t) {
    const Place at = root / "rounds" / t;
    period.push_back(one_graph(rounds[t], at, weights, Connectivity::per_period));
    if (period.back().peers() != period.front().peers())
      at.fail("has " + std::to_string(period.back().peers()) + " peers, /rounds/0 has " +
              std::to_string(period.front().peers()));
  }
  require_connected(period, (root / "rounds").str());
  return period;
}

}  // namespace dpg::topology
