// The graphs dpgossip knows by name, their mixing weights, and graphs read from JSON.
// docs/TOPOLOGY.md describes every kind, weight rule and the JSON format.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/json_io.h"
#include "topology/topology.h"

namespace dpg::topology {

// W is n x n doubles: past this the matrix alone passes 128 MiB and LAPACK takes minutes.
inline constexpr int kMaxPeers = 4096;
// A period's matrices together, in entries (2 GiB of doubles): sixteen rounds of kMaxPeers.
inline constexpr std::uint64_t kMaxPeriodEntries = std::uint64_t{1} << 28;

struct GraphSpec {
  // ring | torus | hypercube | exponential | symmetric-exponential | one-peer-exponential |
  // complete | star | random-regular   ("file" graphs come from from_json instead)
  std::string kind;
  int peers = 0;
  // Undirected graphs: metropolis (W_ij = 1 / (1 + max(d_i, d_j))), uniform (W_ij = 1 / (d_i + 1),
  // doubly stochastic only on a regular graph: the validator rejects it elsewhere, e.g. on a
  // star), lazy ((I + W_metropolis) / 2). Directed graphs: metropolis and uniform both mean
  // W_ij = 1 / (in-degree_i + 1), which on the regular exponential graph is 1 / (out-degree + 1);
  // lazy is (I + W) / 2. one-peer-exponential ignores this: always 1/2 to self and neighbour.
  std::string weights = "metropolis";
  // random-regular only: the degree d (n * d even, d < n); 0 picks min(n - 1, 3 if n is even
  // else 4). Ignored by every other kind.
  int degree = 0;
  std::uint64_t seed = 0;  // random-regular only
};

// The period of mixing matrices: one matrix for static kinds, ceil(log2 n) for
// one-peer-exponential (one matrix for n = 1). Throws invalid_argument for a bad spec, naming
// the valid kinds or weight rules.
std::vector<Topology> make(const GraphSpec& spec);

// A graph read from already-parsed JSON; `where` prefixes errors ("graph.json:"). Either one graph
//   {"peers": n, "edges": [[i, j], [i, j, w], ...], "directed": false, "weights": "metropolis"}
//   {"matrix": [[...], ...]}
// or a time-varying schedule {"rounds": [graph, graph, ...]} of those forms, all with the same n.
// Edges without weights get the rule `weights` (or the graph's own "weights" field); with a
// weight on every edge the self weights are 1 - row sum; mixing the two is an error. A directed
// edge [i, j] means i sends to j (W_ji > 0). Errors name the JSON path:
// "graph.json: /edges/3/1: peer 9 out of range for 8 peers".
std::vector<Topology> from_json(const Json& j, const std::string& where,
                                const std::string& weights = "metropolis");

// The torus on n peers: rows x cols with rows the largest divisor of n not above sqrt(n)
// (1 x n for a prime n, which is a ring).
std::pair<int, int> torus_shape(int n);

const std::vector<std::string>& kinds();         // the kind names, for --help and errors
const std::vector<std::string>& weight_rules();  // metropolis, uniform, lazy

// Mixing weights from a neighbour list (each list ascending, no self, no duplicates). For an
// undirected graph `adjacent` is symmetric; for a directed one adjacent[i] are the peers i
// receives from. Returns W row-major. Throws invalid_argument for an unknown rule.
std::vector<double> mixing_weights(const std::vector<std::vector<int>>& adjacent, bool directed,
                                   const std::string& rule);

}  // namespace dpg::topology
