// A mixing matrix W: one round of gossip sets x_i <- sum_j W_ij x_j. Immutable and validated when
// built (non-negative, doubly stochastic, strongly connected), so that code holding a Topology
// never checks it again. Pure: no I/O, no threads, no transport.
#pragma once

#include <string>
#include <vector>

namespace dpg::topology {

// Entries in [-kNegativeTolerance, 0) are rounding noise and are stored as exactly 0.
inline constexpr double kNegativeTolerance = 1e-12;
inline constexpr double kSumTolerance = 1e-9;
inline constexpr double kSymmetryTolerance = 1e-12;

// Whether the constructor demands that the graph of W on its own be strongly connected. A matrix
// of a time-varying period (one-peer exponential: round t links i and i + 2^t only) need not be;
// the union of its period must be, which require_connected() checks.
enum class Connectivity { required, per_period };

class Topology {
 public:
  // Throws dpg::Error(invalid_argument) with a message that starts with `name` and names the
  // offending row, column, entry or peers: n >= 1; w.size() == n * n; every entry finite and
  // >= 0 (within 1e-12); every row and column sum 1 within 1e-9; the directed graph of the
  // nonzero entries strongly connected.
  Topology(std::string name, int n, std::vector<double> w);
  // The same checks, except that Connectivity::per_period skips strong connectivity.
  Topology(std::string name, int n, std::vector<double> w, Connectivity connectivity);

  const std::string& name() const { return name_; }
  int peers() const { return n_; }
  double weight(int i, int j) const;                        // W_ij; out_of_range outside [0, n)
  const std::vector<double>& matrix() const { return w_; }  // row-major, n x n
  bool symmetric() const { return symmetric_; }             // W == W^T within 1e-12

  struct Neighbourhood {
    double self_weight = 0;            // W_ii
    std::vector<int> recv_from;        // j != i with W_ij > 0, ascending
    std::vector<double> recv_weights;  // W_ij for each
    std::vector<int> send_to;          // k != i with W_ki > 0, ascending
  };
  Neighbourhood neighbourhood(int rank) const;  // out_of_range for a rank outside [0, n)
  std::vector<int> in_degrees() const;   // per peer, |recv_from|, excluding self
  std::vector<int> out_degrees() const;  // per peer, |send_to|, excluding self

 private:
  std::string name_;
  int n_ = 0;
  std::vector<double> w_;
  bool symmetric_ = false;
};

// "" when the directed graph with flows_to[j] = every peer that j's value reaches in one step
// (for W: every i != j with W_ij > 0; for an undirected graph: the neighbour lists) is strongly
// connected, else the first failure found: "peer 0 cannot reach peer 4".
std::string unreachable(const std::vector<std::vector<int>>& flows_to);

// Throws invalid_argument, the message starting with `where`, unless the union of the graphs of
// `period` (all with the same peers) is strongly connected: "where: disconnected: peer 5 cannot
// reach peer 0". Also rejects an empty period and mismatched peer counts.
void require_connected(const std::vector<Topology>& period, const std::string& where);

// The undirected union of the graphs of `period` (all with the same peers, not empty): each
// peer's neighbours in either direction, ascending, without itself.
std::vector<std::vector<int>> undirected_union(const std::vector<Topology>& period);

// A 2-colouring of an undirected graph (`adj`: neighbour lists, both directions): 0 or 1 per
// peer, breadth first from the lowest peer of each component, so every peer computes the same.
// When the graph has an odd cycle, `colour` is empty and odd_u, odd_v are the two peers of an
// edge that closes one.
struct TwoColouring {
  std::vector<int> colour;
  int odd_u = -1, odd_v = -1;
};
TwoColouring two_colouring(const std::vector<std::vector<int>>& adj);

}  // namespace dpg::topology
