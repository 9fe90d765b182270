// Pairwise network DP of gossip (dp/network_dp.h): closed forms, symmetry, never above the local
// epsilon, and the bound checked against the exact linear view of a small run built by brute
// force.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dp/accountant.h"
#include "dp/network_dp.h"
#include "runtime/core/error.h"

namespace dp = dpg::dp;

namespace {

// Equal within 1e-9 relative, or both +inf.
bool same(double a, double b) {
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b));
}

// Ring of n with Metropolis weights (1/3 to self and each side); n = 2 is the 2-node graph.
std::vector<double> ring(int n) {
  std::vector<double> w(static_cast<std::size_t>(n * n), 0.0);
  if (n == 1) return {1.0};
  if (n == 2) return {0.5, 0.5, 0.5, 0.5};
  for (int i = 0; i < n; ++i) {
    w[i * n + i] += 1.0 / 3;
    w[i * n + (i + 1) % n] += 1.0 / 3;
    w[i * n + (i + n - 1) % n] += 1.0 / 3;
  }
  return w;
}

// Directed exponential graph: i receives from i - 2^k, weights 1 / (out-degree + 1).
std::vector<double> exponential(int n) {
  std::vector<int> hops;
  for (int h = 1; h < n; h *= 2) hops.push_back(h);
  const double wt = 1.0 / (static_cast<double>(hops.size()) + 1);
  std::vector<double> w(static_cast<std::size_t>(n * n), 0.0);
  for (int i = 0; i < n; ++i) {
    w[i * n + i] = wt;
    for (int h : hops) w[i * n + (i - h + n) % n] += wt;
  }
  return w;
}

// lambda_max(T_u^T K^-1 T_u) for the exact scalar linear view of peer v of a run of `rounds`
// rounds with momentum mu: x^{t+1} = W x^t - m^t, m^t = mu m^{t-1} + in^t; v sees x_j^t of every
// j it receives from, t = 1..rounds; T_u maps u's inputs to that view, K is the covariance of
// every other input's contribution at unit variance (v's own inputs are known to v).
double exact_gram_max(const std::vector<double>& w, int n, int u, int v, int rounds, double mu) {
  std::vector<int> obs;
  for (int j = 0; j < n; ++j)
    if (j != v && w[v * n + j] > 0) obs.push_back(j);
  const int rows = static_cast<int>(obs.size()) * rounds;
  // response[p][s]: the view's column for a unit input of peer p at step s.
  auto response = [&](int p, int s) {
    std::vector<double> x(n, 0.0), m(n, 0.0), col(rows, 0.0);
    for (int t = 0; t < rounds; ++t) {
      for (int i = 0; i < n; ++i) m[i] = mu * m[i] + (i == p && t == s ? 1.0 : 0.0);
      std::vector<double> nx(n, 0.0);
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) nx[i] += w[i * n + j] * x[j];
        nx[i] -= m[i];
      }
      x = nx;
      for (std::size_t k = 0; k < obs.size(); ++k) col[t * obs.size() + k] = x[obs[k]];
    }
    return col;
  };
  std::vector<double> k(static_cast<std::size_t>(rows * rows), 0.0);
  for (int p = 0; p < n; ++p) {
    if (p == u || p == v) continue;
    for (int s = 0; s < rounds; ++s) {
      const auto c = response(p, s);
      for (int a = 0; a < rows; ++a)
        for (int b = 0; b < rows; ++b) k[a * rows + b] += c[a] * c[b];
    }
  }
  // Cholesky K = L L^T.
  std::vector<double> l(k.size(), 0.0);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j <= i; ++j) {
      double s = k[i * rows + j];
      for (int q = 0; q < j; ++q) s -= l[i * rows + q] * l[j * rows + q];
      l[i * rows + j] = i == j ? std::sqrt(s) : s / l[j * rows + j];
    }
  // B = L^-1 T_u (rows x rounds); G = B^T B.
  std::vector<std::vector<double>> bcols;
  for (int s = 0; s < rounds; ++s) {
    auto c = response(u, s);
    for (int i = 0; i < rows; ++i) {
      for (int q = 0; q < i; ++q) c[i] -= l[i * rows + q] * c[q];
      c[i] /= l[i * rows + i];
    }
    bcols.push_back(c);
  }
  std::vector<double> g(static_cast<std::size_t>(rounds * rounds), 0.0);
  for (int a = 0; a < rounds; ++a)
    for (int b = 0; b < rounds; ++b)
      for (int i = 0; i < rows; ++i) g[a * rounds + b] += bcols[a][i] * bcols[b][i];
  std::vector<double> x(rounds, 1.0);
  double lambda = 0;
  for (int it = 0; it < 2000; ++it) {
    std::vector<double> y(rounds, 0.0);
    for (int a = 0; a < rounds; ++a)
      for (int b = 0; b < rounds; ++b) y[a] += g[a * rounds + b] * x[b];
    double norm = 0;
    for (double e : y) norm += e * e;
    norm = std::sqrt(norm);
    if (norm == 0) return 0;
    lambda = norm;
    for (int a = 0; a < rounds; ++a) x[a] = y[a] / norm;
  }
  return lambda;
}

}  // namespace

TEST_CASE("graph distances on the ring and the directed exponential graph") {
  const auto d = dp::graph_distances(ring(8), 8);
  CHECK(d[0] == 0);
  CHECK(d[0 * 8 + 1] == 1);
  CHECK(d[0 * 8 + 7] == 1);
  CHECK(d[0 * 8 + 4] == 4);
  CHECK(d[3 * 8 + 6] == 3);
  const auto e = dp::graph_distances(exponential(8), 8);
  CHECK(e[0 * 8 + 1] == 1);  // 0 sends to 1, 2, 4
  CHECK(e[0 * 8 + 4] == 1);
  CHECK(e[0 * 8 + 7] == 3);  // 7 = 1 + 2 + 4
  CHECK(e[7 * 8 + 0] == 1);
}

TEST_CASE("complete graph and 2 nodes: every peer is a neighbour, so every entry is local") {
  const double q = 0.0683, sigma = 2.46, delta = 1e-5;
  const long long steps = 586;
  const double local = dp::epsilon_for(q, sigma, steps, delta, dp::AccountantKind::pld).epsilon;
  std::vector<double> j(16, 0.25);
  for (double e : dp::pairwise_epsilons(j, 4, q, sigma, steps, delta)) CHECK(e == local);
  for (double e : dp::pairwise_epsilons(ring(2), 2, q, sigma, steps, delta)) CHECK(e == local);
  for (double e : dp::pairwise_epsilons(std::vector<double>{1.0}, 1, q, sigma, steps, delta))
    CHECK(e == local);
}

TEST_CASE("ring of 4: the opposite peer sees u's gradient through two noisy neighbours") {
  // H = {u}: what leaves u (1/3 to each side per round, 1/(1 - 1/3) = 3/2 rounds on average)
  // is masked by the two neighbours' noise: c = 2 (1/3 * 3/2)^2 = 1/2, sigma_eff = sigma sqrt(3).
  const auto c = dp::absorption_costs(ring(4), 4);
  CHECK(c[0 * 4 + 2] == doctest::Approx(0.5).epsilon(1e-12));
  CHECK(std::isinf(c[0 * 4 + 1]));
  CHECK(std::isinf(c[0 * 4 + 0]));
  const auto s = dp::pairwise_noise_multipliers(ring(4), 4, 2.0);
  CHECK(s[1 * 4 + 3] == doctest::Approx(2.0 * std::sqrt(3.0)).epsilon(1e-12));
  CHECK(s[1 * 4 + 2] == 2.0);
  const auto e = dp::pairwise_epsilons(ring(4), 4, 0.05, 2.0, 200, 1e-5);
  const double amplified =
      dp::epsilon_for(0.05, 2.0 * std::sqrt(3.0), 200, 1e-5, dp::AccountantKind::pld).epsilon;
  // sigma_eff is rounded down to 5 digits, so epsilon is at or just above the exact one.
  CHECK(e[0 * 4 + 2] >= amplified);
  CHECK(e[0 * 4 + 2] == doctest::Approx(amplified).epsilon(1e-3));
  CHECK(e[0 * 4 + 2] < e[0 * 4 + 1]);
}

TEST_CASE("ring of 16: symmetric, never above local, and falling with graph distance") {
  const int n = 16;
  const double q = 0.0683, sigma = 2.46, delta = 1e-5;
  const long long steps = 586;
  const auto w = ring(n);
  const auto c = dp::absorption_costs(w, n);
  const auto e = dp::pairwise_epsilons(w, n, q, sigma, steps, delta);
  const double local = dp::epsilon_for(q, sigma, steps, delta, dp::AccountantKind::pld).epsilon;
  for (int u = 0; u < n; ++u)
    for (int v = 0; v < n; ++v) {
      CHECK(e[u * n + v] <= local);
      // Rotation and reflection.
      CHECK(same(c[u * n + v], c[((u + 5) % n) * n + (v + 5) % n]));
      CHECK(same(c[u * n + v], c[v * n + u]));
    }
  CHECK(e[0 * n + 1] == local);
  CHECK(e[0 * n + 15] == local);
  for (int k = 2; k < n / 2; ++k) {
    CAPTURE(k);
    CHECK(c[0 * n + k + 1] < c[0 * n + k]);
    CHECK(e[0 * n + k + 1] <= e[0 * n + k]);
  }
  CHECK(e[0 * n + 2] < local);
  // More peers between u and v hide u better: at distance 8 the plan spreads the signal over
  // the 12 hidden peers and 2 boundary peers, c >= 1/13 (13 sinks besides u).
  CHECK(c[0 * n + 8] >= 1.0 / 13);
  CHECK(c[0 * n + 8] < 0.2);
}

TEST_CASE("the bound holds for the exact linear view of a short run, with and without momentum") {
  struct Case {
    std::vector<double> w;
    int n;
  };
  const std::vector<Case> cases = {{ring(4), 4}, {ring(6), 6}, {ring(7), 7}, {exponential(8), 8}};
  for (const auto& cs : cases) {
    const auto c = dp::absorption_costs(cs.w, cs.n);
    for (int u = 0; u < cs.n; ++u)
      for (int v = 0; v < cs.n; ++v) {
        if (std::isinf(c[u * cs.n + v])) continue;
        for (double mu : {0.0, 0.9}) {
          CAPTURE(cs.n);
          CAPTURE(u);
          CAPTURE(v);
          CAPTURE(mu);
          const double g = exact_gram_max(cs.w, cs.n, u, v, 14, mu);
          CHECK(g <= c[u * cs.n + v] * (1 + 1e-9));
          // Not vacuous: the exact view leaks at least a fair share of what the bound allows.
          CHECK(g >= 0.2 * c[u * cs.n + v]);
        }
      }
  }
}

TEST_CASE("bad arguments name what is wrong") {
  CHECK_THROWS_WITH_AS(dp::pairwise_epsilons(std::vector<double>{0.5, 0.5, 0.5}, 2, 0.1, 1, 10,
                                             1e-5),
                       doctest::Contains("peers^2"), dpg::Error);
  CHECK_THROWS_WITH_AS(dp::absorption_costs(std::vector<double>{0.9, 0.1, 0.0, 1.0}, 2),
                       doctest::Contains("sums to"), dpg::Error);
  CHECK_THROWS_WITH_AS(dp::absorption_costs(std::vector<double>{1, 0, 0, 1}, 2),
                       doctest::Contains("strongly connected"), dpg::Error);
  CHECK_THROWS_WITH_AS(dp::pairwise_noise_multipliers(ring(4), 4, 0.0),
                       doctest::Contains("sigma"), dpg::Error);
  CHECK_THROWS_WITH_AS(dp::pairwise_epsilons(ring(4), 4, 0.0, 1, 10, 1e-5),
                       doctest::Contains("q must be"), dpg::Error);
  CHECK_THROWS_WITH_AS(dp::pairwise_epsilons(ring(4), 4, 0.1, 1, 10, 1.0),
                       doctest::Contains("delta"), dpg::Error);
  CHECK_THROWS_WITH_AS(dp::absorption_costs(std::vector<double>(200 * 200, 1.0 / 200), 200),
                       doctest::Contains("peers must be"), dpg::Error);
}
