// Pairwise network DP of gossip: the absorption bound of dp/network_dp.h (derivation in
// docs/GOSSIP.md, "What a curious neighbour learns").
#include "dp/network_dp.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <string>

#include "runtime/core/error.h"

namespace dpg::dp {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kStochasticTolerance = 1e-6;
constexpr int kGammaSteps = 32;  // gamma in {0, 1/32, ..., 1}

[[noreturn]] void bad(const std::string& message) {
  fail(Code::invalid_argument, "network dp: " + message);
}

std::size_t at(int i, int j, int n) {
  return static_cast<std::size_t>(i) * static_cast<std::size_t>(n) + static_cast<std::size_t>(j);
}

// Every peer reachable from `from` along j -> i when W_ij > 0 (or against it when `reverse`).
std::vector<char> reach(std::span<const double> w, int n, int from, bool reverse) {
  std::vector<char> seen(static_cast<std::size_t>(n), 0);
  std::vector<int> stack{from};
  seen[static_cast<std::size_t>(from)] = 1;
  while (!stack.empty()) {
    const int j = stack.back();
    stack.pop_back();
    for (int i = 0; i < n; ++i) {
      const double wij = reverse ? w[at(j, i, n)] : w[at(i, j, n)];
      if (wij > 0 && !seen[static_cast<std::size_t>(i)]) {
        seen[static_cast<std::size_t>(i)] = 1;
        stack.push_back(i);
      }
    }
  }
  return seen;
}

void validate(std::span<const double> w, int n) {
  if (n < 1 || n > kNetworkDpMaxPeers)
    bad("peers must be in [1, " + std::to_string(kNetworkDpMaxPeers) + "], got " +
        std::to_string(n));
  if (w.size() != static_cast<std::size_t>(n) * static_cast<std::size_t>(n))
    bad("the mixing matrix has " + std::to_string(w.size()) + " entries, want peers^2 = " +
        std::to_string(n * n));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const double x = w[at(i, j, n)];
      if (!std::isfinite(x) || x < 0)
        bad("W[" + std::to_string(i) + "][" + std::to_string(j) + "] = " + std::to_string(x) +
            " is not a finite non-negative weight");
    }
  for (int i = 0; i < n; ++i) {
    double row = 0, col = 0;
    for (int j = 0; j < n; ++j) {
      row += w[at(i, j, n)];
      col += w[at(j, i, n)];
    }
    if (std::abs(row - 1) > kStochasticTolerance)
      bad("row " + std::to_string(i) + " of W sums to " + std::to_string(row) + ", not 1");
    if (std::abs(col - 1) > kStochasticTolerance)
      bad("column " + std::to_string(i) + " of W sums to " + std::to_string(col) + ", not 1");
  }
  const auto fwd = reach(w, n, 0, false), back = reach(w, n, 0, true);
  for (int i = 0; i < n; ++i)
    if (!fwd[static_cast<std::size_t>(i)] || !back[static_cast<std::size_t>(i)])
      bad("the graph of W is not strongly connected (peer " + std::to_string(i) +
          " and peer 0 do not reach each other)");
}

// In-place inverse of the m x m matrix `a` by Gauss-Jordan with partial pivoting. The matrices
// here are I - (substochastic with spectral radius < 1), so well conditioned; a zero pivot is a
// bug.
void invert(std::vector<double>& a, int m) {
  std::vector<double> inv(static_cast<std::size_t>(m) * static_cast<std::size_t>(m), 0.0);
  for (int i = 0; i < m; ++i) inv[at(i, i, m)] = 1;
  for (int col = 0; col < m; ++col) {
    int piv = col;
    for (int r = col + 1; r < m; ++r)
      if (std::abs(a[at(r, col, m)]) > std::abs(a[at(piv, col, m)])) piv = r;
    if (!(std::abs(a[at(piv, col, m)]) > 1e-300))
      fail(Code::internal, "network dp: singular I - W_HH (a disconnected hidden set)");
    if (piv != col)
      for (int k = 0; k < m; ++k) {
        std::swap(a[at(piv, k, m)], a[at(col, k, m)]);
        std::swap(inv[at(piv, k, m)], inv[at(col, k, m)]);
      }
    const double p = a[at(col, col, m)];
    for (int k = 0; k < m; ++k) {
      a[at(col, k, m)] /= p;
      inv[at(col, k, m)] /= p;
    }
    for (int r = 0; r < m; ++r) {
      if (r == col) continue;
      const double f = a[at(r, col, m)];
      if (f == 0) continue;
      for (int k = 0; k < m; ++k) {
        a[at(r, k, m)] -= f * a[at(col, k, m)];
        inv[at(r, k, m)] -= f * inv[at(col, k, m)];
      }
    }
  }
  a.swap(inv);
}

// For the listener v: the cost of the best plan for every u in H (cost[u]), others untouched.
void costs_for_listener(std::span<const double> w, int n, int v, std::vector<double>& cost) {
  // H: every peer except v and the peers v receives from.
  std::vector<int> hidden;
  for (int i = 0; i < n; ++i)
    if (i != v && !(w[at(v, i, n)] > 0)) hidden.push_back(i);
  const int m = static_cast<int>(hidden.size());
  if (m == 0) return;
  // Boundary: peers outside H that receive from H (v itself never does, by construction).
  std::vector<int> boundary;
  for (int b = 0; b < n; ++b) {
    if (std::find(hidden.begin(), hidden.end(), b) != hidden.end()) continue;
    for (int h : hidden)
      if (w[at(b, h, n)] > 0) {
        boundary.push_back(b);
        break;
      }
  }
  std::vector<double> whh(static_cast<std::size_t>(m) * static_cast<std::size_t>(m));
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < m; ++j) whh[at(i, j, m)] = w[at(hidden[i], hidden[j], n)];

  std::vector<double> best(static_cast<std::size_t>(m), kInf);
  std::vector<double> minv, a(static_cast<std::size_t>(m)), bvec(static_cast<std::size_t>(m)),
      s(static_cast<std::size_t>(m));
  for (int g = 0; g <= kGammaSteps; ++g) {
    const double gamma = static_cast<double>(g) / kGammaSteps;
    // M0 = I - (1 - gamma) W_HH; the plan for u solves (M0 - gamma W_HH e_u e_u^T) S = e_u,
    // S = the total signal that sits at each hidden peer (before absorption), summed over rounds.
    minv.assign(whh.size(), 0.0);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j) minv[at(i, j, m)] = (i == j ? 1.0 : 0.0) - (1 - gamma) * whh[at(i, j, m)];
    invert(minv, m);
    for (int ui = 0; ui < m; ++ui) {
      for (int i = 0; i < m; ++i) {
        a[static_cast<std::size_t>(i)] = minv[at(i, ui, m)];
        double acc = 0;
        for (int k = 0; k < m; ++k) acc += minv[at(i, k, m)] * whh[at(k, ui, m)];
        bvec[static_cast<std::size_t>(i)] = acc;
      }
      const double denom = 1 - gamma * bvec[static_cast<std::size_t>(ui)];
      if (!(denom > 0)) continue;
      const double su = a[static_cast<std::size_t>(ui)] / denom;
      for (int i = 0; i < m; ++i)
        s[static_cast<std::size_t>(i)] = a[static_cast<std::size_t>(i)] + gamma * su * bvec[static_cast<std::size_t>(i)];
      double c = 0;
      for (int i = 0; i < m; ++i)
        if (i != ui) c += std::pow(gamma * s[static_cast<std::size_t>(i)], 2);  // A_w
      for (int b : boundary) {
        double e = 0;  // E_b: what leaves H for b, after absorption
        for (int i = 0; i < m; ++i)
          e += w[at(b, hidden[i], n)] * (i == ui ? 1.0 : 1 - gamma) * s[static_cast<std::size_t>(i)];
        c += e * e;
      }
      if (std::isfinite(c) && c > 0)
        best[static_cast<std::size_t>(ui)] = std::min(best[static_cast<std::size_t>(ui)], c);
    }
  }
  for (int ui = 0; ui < m; ++ui) cost[at(hidden[ui], v, n)] = best[static_cast<std::size_t>(ui)];
}

// Rounds sigma_eff down to 5 significant digits: fewer distinct accountant runs, and a smaller
// multiplier can only raise epsilon.
double round_down(double x) {
  if (!(x > 0) || !std::isfinite(x)) return x;
  const double scale = std::pow(10.0, 4 - std::floor(std::log10(x)));
  return std::floor(x * scale) / scale;
}

}  // namespace

std::vector<int> graph_distances(std::span<const double> w, int peers) {
  validate(w, peers);
  const int n = peers;
  std::vector<int> d(static_cast<std::size_t>(n) * static_cast<std::size_t>(n), -1);
  for (int u = 0; u < n; ++u) {
    std::vector<int> frontier{u};
    d[at(u, u, n)] = 0;
    for (int hop = 1; !frontier.empty(); ++hop) {
      std::vector<int> next;
      for (int j : frontier)
        for (int i = 0; i < n; ++i)
          if (w[at(i, j, n)] > 0 && d[at(u, i, n)] < 0) {
            d[at(u, i, n)] = hop;
            next.push_back(i);
          }
      frontier.swap(next);
    }
  }
  return d;
}

std::vector<double> absorption_costs(std::span<const double> w, int peers) {
  validate(w, peers);
  const int n = peers;
  std::vector<double> cost(static_cast<std::size_t>(n) * static_cast<std::size_t>(n), kInf);
  for (int v = 0; v < n; ++v) costs_for_listener(w, n, v, cost);
  // u itself and every peer u sends to: no amplification.
  for (int u = 0; u < n; ++u)
    for (int v = 0; v < n; ++v)
      if (u == v || w[at(v, u, n)] > 0) cost[at(u, v, n)] = kInf;
  return cost;
}

std::vector<double> pairwise_noise_multipliers(std::span<const double> w, int peers,
                                               double sigma) {
  if (!(sigma > 0) || !std::isfinite(sigma))
    bad("sigma must be finite and > 0, got " + std::to_string(sigma));
  std::vector<double> out = absorption_costs(w, peers);
  for (double& c : out) c = std::isinf(c) ? sigma : sigma * std::sqrt(1 + 1 / c);
  return out;
}

namespace {

// pair_epsilon with the local epsilon known; memo keeps one accountant run per rounded multiplier.
double pair_epsilon_given(double local, double q, double sigma, double sigma_eff, long long steps,
                          double delta, AccountantKind kind, std::map<double, double>& memo) {
  if (sigma_eff == sigma) return local;
  const double key = round_down(sigma_eff);
  auto it = memo.find(key);
  if (it == memo.end()) it = memo.emplace(key, epsilon_for(q, key, steps, delta, kind).epsilon).first;
  return std::min(local, it->second);
}

}  // namespace

std::vector<double> pairwise_epsilons(std::span<const double> w, int peers, double q,
                                      double sigma, long long steps, double delta,
                                      AccountantKind kind) {
  if (!(q > 0 && q <= 1)) bad("q must be in (0, 1], got " + std::to_string(q));
  if (steps < 0) bad("steps must be >= 0, got " + std::to_string(steps));
  if (!(delta > 0 && delta < 1)) bad("delta must be in (0, 1), got " + std::to_string(delta));
  std::vector<double> eff = pairwise_noise_multipliers(w, peers, sigma);
  const double local = epsilon_for(q, sigma, steps, delta, kind).epsilon;
  std::map<double, double> memo;
  for (double& s : eff) s = pair_epsilon_given(local, q, sigma, s, steps, delta, kind, memo);
  return eff;
}

double pair_epsilon(double q, double sigma, double sigma_eff, long long steps, double delta,
                    AccountantKind kind) {
  std::map<double, double> memo;
  return pair_epsilon_given(epsilon_for(q, sigma, steps, delta, kind).epsilon, q, sigma,
                            sigma_eff, steps, delta, kind, memo);
}

std::vector<DistanceRow> rows_by_distance(std::span<const int> distance,
                                          std::span<const double> sigma_eff, int peers, double q,
                                          double sigma, long long steps, double delta,
                                          AccountantKind kind) {
  const auto n = static_cast<std::size_t>(peers);
  if (peers < 1 || distance.size() != n * n || sigma_eff.size() != n * n)
    bad("distance and sigma_eff must be peers x peers");
  std::vector<DistanceRow> rows;
  for (std::size_t k = 0; k < distance.size(); ++k) {
    const int d = distance[k];
    if (d < 1) continue;
    if (rows.size() < static_cast<std::size_t>(d)) rows.resize(static_cast<std::size_t>(d));
    DistanceRow& row = rows[static_cast<std::size_t>(d - 1)];
    row.distance = d;
    row.least_sigma = row.pairs == 0 ? sigma_eff[k] : std::min(row.least_sigma, sigma_eff[k]);
    ++row.pairs;
  }
  const double local = epsilon_for(q, sigma, steps, delta, kind).epsilon;
  std::map<double, double> memo;
  for (std::size_t d = 0; d < rows.size(); ++d) {
    rows[d].distance = static_cast<int>(d) + 1;
    if (rows[d].pairs > 0) {
      rows[d].worst_epsilon =
          pair_epsilon_given(local, q, sigma, rows[d].least_sigma, steps, delta, kind, memo);
    }
  }
  return rows;
}

}  // namespace dpg::dp
