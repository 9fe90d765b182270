#include "topology/generators.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "runtime/core/error.h"
#include "runtime/core/rng.h"

namespace dpg::topology {
namespace {

constexpr int kRandomRegularAttempts = 200;

using Adjacency = std::vector<std::vector<int>>;

[[noreturn]] void bad(const std::string& message) { fail(Code::invalid_argument, message); }

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

int mod(long long a, int n) { return static_cast<int>(((a % n) + n) % n); }

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

// Smallest tau with 2^tau >= n: ceil(log2 n), 0 for n = 1.
int ceil_log2(int n) {
  int tau = 0;
  while ((1LL << tau) < n) ++tau;
  return tau;
}

// An undirected graph from a rule giving each peer's candidate neighbours; the candidates are
// deduplicated, self is dropped and every edge is made symmetric.
template <class Neighbours>
Adjacency undirected(int n, Neighbours neighbours) {
  std::vector<std::set<int>> sets(n);
  for (int i = 0; i < n; ++i)
    for (int j : neighbours(i)) {
      const int k = mod(j, n);
      if (k == i) continue;
      sets[i].insert(k);
      sets[k].insert(i);
    }
  Adjacency adj(n);
  for (int i = 0; i < n; ++i) adj[i].assign(sets[i].begin(), sets[i].end());
  return adj;
}

// One try of the pairing model with Steger and Wormald's refinement: join random pairs of free
// stubs that make neither a loop nor a double edge; when random picks keep failing, choose among
// all suitable pairs left, and give up (false) when there is none. Every draw is dpg::Rng's
// (rng.h), never a std:: distribution, whose results differ between standard libraries: peers
// built on different systems must draw the same graph from the same seed.
bool pair_stubs(int n, int d, Rng& rng, std::vector<std::set<int>>& sets) {
  sets.assign(n, {});
  std::vector<int> stubs;
  stubs.reserve(static_cast<std::size_t>(n) * d);
  for (int i = 0; i < n; ++i) stubs.insert(stubs.end(), d, i);
  auto suitable = [&](std::size_t a, std::size_t b) {
    return stubs[a] != stubs[b] && !sets[stubs[a]].count(stubs[b]);
  };
  auto join = [&](std::size_t a, std::size_t b) {
    sets[stubs[a]].insert(stubs[b]);
    sets[stubs[b]].insert(stubs[a]);
    for (std::size_t k : {std::max(a, b), std::min(a, b)}) {
      stubs[k] = stubs.back();
      stubs.pop_back();
    }
  };
  while (!stubs.empty()) {
    bool joined_one = false;
    for (int tries = 0; tries < 64 && !joined_one; ++tries) {
      const std::size_t a = rng.below(stubs.size()), b = rng.below(stubs.size());
      if (a != b && suitable(a, b)) {
        join(a, b);
        joined_one = true;
      }
    }
    if (joined_one) continue;
    std::vector<std::pair<std::size_t, std::size_t>> options;
    for (std::size_t a = 0; a < stubs.size(); ++a)
      for (std::size_t b = a + 1; b < stubs.size(); ++b)
        if (suitable(a, b)) options.emplace_back(a, b);
    if (options.empty()) return false;
    const auto [a, b] = options[rng.below(options.size())];
    join(a, b);
  }
  return true;
}

Adjacency random_regular(int n, int d, std::uint64_t seed) {
  const std::string what =
      "random-regular with " + std::to_string(n) + " peers and degree " + std::to_string(d);
  if (n == 1) return Adjacency(1);
  if (d < 1 || d >= n) bad(what + ": the degree must be in [1, " + std::to_string(n - 1) + "]");
  if ((static_cast<long long>(n) * d) % 2 != 0) bad(what + ": peers x degree must be even");
  if (d == 1 && n > 2) bad(what + ": a 1-regular graph on more than 2 peers is never connected");
  // A dense graph is drawn as the complement of a sparse one, where pairing rarely gets stuck.
  const bool complement = d > (n - 1) / 2;
  const int drawn = complement ? n - 1 - d : d;
  Rng rng(seed, stream::kTopology);
  std::vector<std::set<int>> sets;
  for (int attempt = 0; attempt < kRandomRegularAttempts; ++attempt) {
    if (!pair_stubs(n, drawn, rng, sets)) continue;
    Adjacency adj(n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        if (j != i && (sets[i].count(j) > 0) != complement) adj[i].push_back(j);
    if (unreachable(adj).empty()) return adj;
  }
  bad(what + ": no connected simple graph found in " + std::to_string(kRandomRegularAttempts) +
      " attempts with seed " + std::to_string(seed) + "; try another seed or degree");
}

Adjacency static_graph(const GraphSpec& s) {
  const int n = s.peers;
  if (s.kind == "ring") return undirected(n, [](int i) { return std::vector<int>{i - 1, i + 1}; });
  if (s.kind == "torus") {
    const auto [rows, cols] = torus_shape(n);
    return undirected(n, [rows = rows, cols = cols](int i) {
      const int a = i / cols, b = i % cols;
      return std::vector<int>{mod(a + 1, rows) * cols + b, mod(a - 1, rows) * cols + b,
                              a * cols + mod(b + 1, cols), a * cols + mod(b - 1, cols)};
    });
  }
  if (s.kind == "hypercube") {
    if (!power_of_two(n)) bad("hypercube: peers must be a power of two, got " + std::to_string(n));
    return undirected(n, [n](int i) {
      std::vector<int> v;
      for (int bit = 1; bit < n; bit <<= 1) v.push_back(i ^ bit);
      return v;
    });
  }
  if (s.kind == "symmetric-exponential")
    return undirected(n, [n](int i) {
      std::vector<int> v;
      for (long long step = 1; step < n; step <<= 1) {
        v.push_back(mod(i + step, n));
        v.push_back(mod(i - step, n));
      }
      return v;
    });
  if (s.kind == "complete")
    return undirected(n, [n](int) {
      std::vector<int> v(n);
      for (int j = 0; j < n; ++j) v[j] = j;
      return v;
    });
  if (s.kind == "star")
    return undirected(n, [n](int i) {
      if (i != 0) return std::vector<int>{0};
      std::vector<int> v(n);
      for (int j = 0; j < n; ++j) v[j] = j;
      return v;
    });
  if (s.kind == "random-regular") {
    const int d = s.degree > 0 ? s.degree : std::min(n - 1, n % 2 == 0 ? 3 : 4);
    return random_regular(n, d, s.seed);
  }
  fail(Code::internal, "static_graph: unhandled kind " + s.kind);
}

// The exponential graph: i receives from (i - 2^k) mod n for every 2^k < n.
Adjacency exponential_in(int n) {
  Adjacency in(n);
  for (int i = 0; i < n; ++i) {
    for (long long step = 1; step < n; step <<= 1) in[i].push_back(mod(i - step, n));
    std::sort(in[i].begin(), in[i].end());
  }
  return in;
}

// Round t of the one-peer exponential graph: i sends to i + 2^t and receives from i - 2^t, 1/2
// each.
std::vector<Topology> one_peer_exponential(int n) {
  if (n == 1) return {Topology("one-peer-exponential", 1, {1.0})};
  const int tau = ceil_log2(n);
  std::vector<Topology> period;
  for (int t = 0; t < tau; ++t) {
    std::vector<double> w(static_cast<std::size_t>(n) * n, 0.0);
    for (int i = 0; i < n; ++i) {
      w[static_cast<std::size_t>(i) * n + i] += 0.5;
      w[static_cast<std::size_t>(i) * n + mod(i - (1LL << t), n)] += 0.5;
    }
    period.emplace_back(
        "one-peer-exponential round " + std::to_string(t) + " of " + std::to_string(tau), n,
        std::move(w), Connectivity::per_period);
  }
  require_connected(period, "one-peer-exponential");
  return period;
}

bool regular(const Adjacency& adj) {
  for (const auto& a : adj)
    if (a.size() != adj.front().size()) return false;
  return true;
}

}  // namespace

std::pair<int, int> torus_shape(int n) {
  int rows = 1;
  for (int r = 1; static_cast<long long>(r) * r <= n; ++r)
    if (n % r == 0) rows = r;
  return {rows, n / rows};
}

const std::vector<std::string>& kinds() {
  // clang-format off
  static const std::vector<std::string> names = {
      "ring", "torus", "hypercube", "exponential", "symmetric-exponential",
      "one-peer-exponential", "complete", "star", "random-regular"};
  // clang-format on
  return names;
}

const std::vector<std::string>& weight_rules() {
  static const std::vector<std::string> names = {"metropolis", "uniform", "lazy"};
  return names;
}

std::vector<double> mixing_weights(const Adjacency& adjacent, bool directed,
                                   const std::string& rule) {
  const auto& rules = weight_rules();
  if (std::find(rules.begin(), rules.end(), rule) == rules.end())
    bad("unknown weight rule \"" + rule + "\"; expected one of " + joined(rules));
  const int n = static_cast<int>(adjacent.size());
  std::vector<double> w(static_cast<std::size_t>(n) * n, 0.0);
  auto at = [&](int i, int j) -> double& { return w[static_cast<std::size_t>(i) * n + j]; };
  for (int i = 0; i < n; ++i) {
    const double di = static_cast<double>(adjacent[i].size());
    double off = 0;
    for (int j : adjacent[i]) {
      const double dj = static_cast<double>(adjacent[j].size());
      // Directed graphs only have the receiver's view: W_ij = 1 / (in-degree_i + 1).
      const double v = (rule == "uniform" || directed) ? 1 / (di + 1) : 1 / (1 + std::max(di, dj));
      at(i, j) = v;
      off += v;
    }
    at(i, i) = 1 - off;
  }
  if (rule == "lazy")
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) at(i, j) = (at(i, j) + (i == j ? 1.0 : 0.0)) / 2;
  return w;
}

std::vector<Topology> make(const GraphSpec& spec) {
  const auto& names = kinds();
  if (std::find(names.begin(), names.end(), spec.kind) == names.end())
    bad("unknown topology kind \"" + spec.kind + "\"; expected one of " + joined(names) +
        (spec.kind == "file" ? " (a file graph comes from from_json / --from)" : ""));
  if (spec.peers < 1 || spec.peers > kMaxPeers)
    bad(spec.kind + ": peers must be in [1, " + std::to_string(kMaxPeers) + "], got " +
        std::to_string(spec.peers));
  const auto& rules = weight_rules();
  if (std::find(rules.begin(), rules.end(), spec.weights) == rules.end())
    bad(spec.kind + ": unknown weight rule \"" + spec.weights + "\"; expected one of " +
        joined(rules));
  if (spec.kind == "one-peer-exponential") return one_peer_exponential(spec.peers);
  const bool directed = spec.kind == "exponential";
  const Adjacency adj = directed ? exponential_in(spec.peers) : static_graph(spec);
  try {
    return {Topology(spec.kind, spec.peers, mixing_weights(adj, directed, spec.weights))};
  } catch (const Error& e) {
    if (spec.weights != "uniform" || regular(adj)) throw;
    bad(std::string(e.what()) + "; uniform weights are doubly stochastic only on a regular " +
        "graph, use metropolis or lazy");
  }
}

}  // namespace dpg::topology
