#include "topology/topology.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <utility>

#include "runtime/core/error.h"

namespace dpg::topology {
namespace {

std::string num(double v) {
  std::ostringstream os;
  os.precision(12);
  os << v;
  return os.str();
}

void add_flows(const Topology& t, std::vector<std::vector<int>>& flows_to) {
  const int n = t.peers();
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i != j && t.weight(i, j) > 0) flows_to[j].push_back(i);
}

// Per peer, the links W_ij > 0 (i != j) in its row (receiving) or in its column (sending).
std::vector<int> link_counts(const Topology& t, bool receiving) {
  std::vector<int> d(t.peers(), 0);
  for (int i = 0; i < t.peers(); ++i)
    for (int j = 0; j < t.peers(); ++j)
      if (i != j && t.weight(i, j) > 0) ++d[receiving ? i : j];
  return d;
}

}  // namespace

Topology::Topology(std::string name, int n, std::vector<double> w)
    : Topology(std::move(name), n, std::move(w), Connectivity::required) {}

Topology::Topology(std::string name, int n, std::vector<double> w, Connectivity connectivity)
    : name_(std::move(name)), n_(n), w_(std::move(w)) {
  auto bad = [this](const std::string& what) { fail(Code::invalid_argument, name_ + ": " + what); };
  if (n_ < 1) bad("peers must be >= 1, got " + std::to_string(n_));
  const std::size_t size = static_cast<std::size_t>(n_) * static_cast<std::size_t>(n_);
  if (w_.size() != size)
    bad("matrix has " + std::to_string(w_.size()) + " entries, expected " + std::to_string(size) +
        " (" + std::to_string(n_) + " x " + std::to_string(n_) + ")");
  for (int i = 0; i < n_; ++i)
    for (int j = 0; j < n_; ++j) {
      double& v = w_[static_cast<std::size_t>(i) * n_ + j];
      auto entry = [&] {
        return "entry (" + std::to_string(i) + ", " + std::to_string(j) + ") is " + num(v);
      };
      if (!std::isfinite(v)) bad(entry() + ", not finite");
      if (v < -kNegativeTolerance) bad(entry() + ", must be >= 0");
      if (v < 0) v = 0;
    }
  for (int i = 0; i < n_; ++i) {
    double row = 0;
    for (int j = 0; j < n_; ++j) row += weight(i, j);
    if (std::abs(row - 1) > kSumTolerance)
      bad("row " + std::to_string(i) + " sums to " + num(row) + ", not 1");
  }
  for (int j = 0; j < n_; ++j) {
    double column = 0;
    for (int i = 0; i < n_; ++i) column += weight(i, j);
    if (std::abs(column - 1) > kSumTolerance)
      bad("column " + std::to_string(j) + " sums to " + num(column) +
          ", not 1 (W must be doubly stochastic so that gossip keeps the average)");
  }
  if (connectivity == Connectivity::required) {
    std::vector<std::vector<int>> flows_to(n_);
    add_flows(*this, flows_to);
    const std::string problem = unreachable(flows_to);
    if (!problem.empty()) bad("disconnected: " + problem);
  }
  symmetric_ = true;
  for (int i = 0; i < n_ && symmetric_; ++i)
    for (int j = i + 1; j < n_; ++j)
      if (std::abs(weight(i, j) - weight(j, i)) > kSymmetryTolerance) {
        symmetric_ = false;
        break;
      }
}

double Topology::weight(int i, int j) const {
  if (i < 0 || i >= n_ || j < 0 || j >= n_)
    fail(Code::out_of_range, name_ + ": entry (" + std::to_string(i) + ", " + std::to_string(j) +
                                 ") outside " + std::to_string(n_) + " peers");
  return w_[static_cast<std::size_t>(i) * n_ + j];
}

Topology::Neighbourhood Topology::neighbourhood(int rank) const {
  if (rank < 0 || rank >= n_)
    fail(Code::out_of_range,
         name_ + ": rank " + std::to_string(rank) + " outside " + std::to_string(n_) + " peers");
  Neighbourhood nb;
  nb.self_weight = weight(rank, rank);
  for (int j = 0; j < n_; ++j) {
    if (j == rank) continue;
    if (weight(rank, j) > 0) {
      nb.recv_from.push_back(j);
      nb.recv_weights.push_back(weight(rank, j));
    }
    if (weight(j, rank) > 0) nb.send_to.push_back(j);
  }
  return nb;
}

std::vector<int> Topology::in_degrees() const { return link_counts(*this, true); }

std::vector<int> Topology::out_degrees() const { return link_counts(*this, false); }

std::string unreachable(const std::vector<std::vector<int>>& flows_to) {
  const int n = static_cast<int>(flows_to.size());
  // Forward from 0, then backward to 0: together they decide strong connectivity.
  for (const bool forward : {true, false}) {
    std::vector<std::vector<int>> next(n);
    if (forward) {
      next = flows_to;
    } else {
      for (int j = 0; j < n; ++j)
        for (int i : flows_to[j]) next[i].push_back(j);
    }
    std::vector<char> seen(n, 0);
    std::vector<int> stack{0};
    seen[0] = 1;
    while (!stack.empty()) {
      const int v = stack.back();
      stack.pop_back();
      for (int u : next[v])
        if (!seen[u]) {
          seen[u] = 1;
          stack.push_back(u);
        }
    }
    for (int k = 0; k < n; ++k)
      if (!seen[k])
        return forward ? "peer 0 cannot reach peer " + std::to_string(k)
                       : "peer " + std::to_string(k) + " cannot reach peer 0";
  }
  return "";
}

void require_connected(const std::vector<Topology>& period, const std::string& where) {
  if (period.empty()) fail(Code::invalid_argument, where + ": empty period (no mixing matrix)");
  const int n = period.front().peers();
  std::vector<std::vector<int>> flows_to(n);
  for (std::size_t t = 0; t < period.size(); ++t) {
    if (period[t].peers() != n)
      fail(Code::invalid_argument,
           where + ": matrix " + std::to_string(t) + " (" + period[t].name() + ") has " +
               std::to_string(period[t].peers()) + " peers, matrix 0 has " + std::to_string(n));
    add_flows(period[t], flows_to);
  }
  const std::string problem = unreachable(flows_to);
  if (!problem.empty())
    fail(Code::invalid_argument, where + ": disconnected" +
                                     (period.size() > 1 ? " over the whole period" : "") + ": " +
                                     problem);
}

std::vector<std::vector<int>> undirected_union(const std::vector<Topology>& period) {
  const int n = period.front().peers();
  std::vector<std::vector<int>> adj(static_cast<std::size_t>(n));
  for (const auto& g : period) {
    for (int r = 0; r < n; ++r) {
      const auto nb = g.neighbourhood(r);
      auto& a = adj[static_cast<std::size_t>(r)];
      a.insert(a.end(), nb.recv_from.begin(), nb.recv_from.end());
      a.insert(a.end(), nb.send_to.begin(), nb.send_to.end());
    }
  }
  for (auto& a : adj) {
    std::sort(a.begin(), a.end());
    a.erase(std::unique(a.begin(), a.end()), a.end());
  }
  return adj;
}

TwoColouring two_colouring(const std::vector<std::vector<int>>& adj) {
  TwoColouring out;
  std::vector<int>& colour = out.colour;
  colour.assign(adj.size(), -1);
  std::vector<std::size_t> queue;
  for (std::size_t root = 0; root < adj.size(); ++root) {
    if (colour[root] >= 0) continue;
    colour[root] = 0;
    queue.assign(1, root);
    for (std::size_t head = 0; head < queue.size(); ++head) {
      const std::size_t u = queue[head];
      for (int v : adj[u]) {
        int& c = colour[static_cast<std::size_t>(v)];
        if (c < 0) {
          c = 1 - colour[u];
          queue.push_back(static_cast<std::size_t>(v));
        } else if (c == colour[u]) {
          out.odd_u = static_cast<int>(u);
          out.odd_v = v;
          colour.clear();
          return out;
        }
      }
    }
  }
  return out;
}

}  // namespace dpg::topology
