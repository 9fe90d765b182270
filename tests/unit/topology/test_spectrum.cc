// rho, the spectral gap and rounds against closed forms: the eigenvalues of circulant matrices
// (ring, exponential graph), of products of cycles (torus) and of the hypercube; and, for the
// directed exponential graph, a second computation by power iteration, independent of LAPACK.
#include <doctest/doctest.h>

#include <cmath>
#include <complex>
#include <limits>
#include <numbers>
#include <vector>

#include "topology/generators.h"
#include "topology/spectrum.h"

namespace topo = dpg::topology;
using std::numbers::pi;

namespace {

topo::Topology one(const std::string& kind, int n, const std::string& weights = "metropolis") {
  const auto period = topo::make({kind, n, weights, 0, 0});
  REQUIRE(period.size() == 1);
  return period.front();
}

double rounds_for(double rho) { return std::ceil(std::log(1000.0) / -std::log(rho) - 1e-9); }

// ||W - J/n||_2 by power iteration on A^T A, A = W - J/n: needs nothing but W.
double power_iteration_rho(const topo::Topology& t) {
  const int n = t.peers();
  std::vector<double> x(n), y(n), z(n);
  for (int i = 0; i < n; ++i) x[i] = std::sin(1.0 + 3.7 * i);  // generic start
  auto apply = [&](const std::vector<double>& in, std::vector<double>& out, bool transpose) {
    double mean = 0;
    for (double v : in) mean += v / n;
    for (int i = 0; i < n; ++i) {
      out[i] = -mean;  // (J/n) in = mean everywhere
      for (int j = 0; j < n; ++j) out[i] += (transpose ? t.weight(j, i) : t.weight(i, j)) * in[j];
    }
  };
  double lambda = 0;
  for (int it = 0; it < 5000; ++it) {
    apply(x, y, false);
    apply(y, z, true);
    double norm = 0, dot = 0;
    for (int i = 0; i < n; ++i) {
      norm += z[i] * z[i];
      dot += x[i] * z[i];
    }
    double xx = 0;
    for (double v : x) xx += v * v;
    lambda = dot / xx;  // Rayleigh quotient of A^T A
    norm = std::sqrt(norm);
    for (int i = 0; i < n; ++i) x[i] = z[i] / norm;
  }
  return std::sqrt(lambda);
}

// The directed exponential graph is circulant, hence normal: its singular values are the moduli
// of its eigenvalues (1 + sum_k e^{-2 pi i m 2^k / n}) / (tau + 1), m = 1 .. n-1.
double circulant_exponential_rho(int n) {
  std::vector<long long> steps;
  for (long long s = 1; s < n; s <<= 1) steps.push_back(s);
  double rho = 0;
  for (int m = 1; m < n; ++m) {
    std::complex<double> lambda = 1;
    for (long long s : steps) lambda += std::polar(1.0, -2 * pi * m * s / n);
    rho = std::max(rho, std::abs(lambda) / static_cast<double>(steps.size() + 1));
  }
  return rho;
}

}  // namespace

TEST_CASE("ring with weights 1/3: rho = 1/3 + 2/3 cos(2 pi / n)") {
  for (int n = 5; n <= 32; ++n) {
    CAPTURE(n);
    const double want = 1.0 / 3 + 2.0 / 3 * std::cos(2 * pi / n);
    for (const char* rule : {"uniform", "metropolis"}) {
      const topo::Spectrum s = topo::analyse(one("ring", n, rule));
      CHECK(s.rho == doctest::Approx(want).epsilon(1e-9));
      CHECK(std::abs(s.rho - want) < 1e-9);
      CHECK(s.spectral_gap == doctest::Approx(1 - want).epsilon(1e-9));
      CHECK(s.rounds_1000x == rounds_for(want));
    }
  }
}

TEST_CASE("lazy ring: rho = (1 + lambda_2) / 2") {
  for (int n : {5, 10, 17}) {
    const double lambda2 = 1.0 / 3 + 2.0 / 3 * std::cos(2 * pi / n);
    CHECK(std::abs(topo::analyse(one("ring", n, "lazy")).rho - (1 + lambda2) / 2) < 1e-9);
  }
}

TEST_CASE("hypercube of dimension d with uniform weights: rho = (d - 1) / (d + 1)") {
  for (int d = 1; d <= 6; ++d) {
    CAPTURE(d);
    const topo::Spectrum s = topo::analyse(one("hypercube", 1 << d, "uniform"));
    CHECK(std::abs(s.rho - (d - 1.0) / (d + 1.0)) < 1e-9);
  }
  CHECK(topo::analyse(one("hypercube", 2, "uniform")).rounds_1000x == 1);
}

TEST_CASE("complete graph with uniform weights averages exactly in one round") {
  for (int n = 1; n <= 20; ++n) {
    const topo::Spectrum s = topo::analyse(one("complete", n, "uniform"));
    CHECK(s.rho < 1e-12);
    CHECK(s.rounds_1000x == 1);
  }
}

TEST_CASE("torus with weights 1/5 against the eigenvalues of a product of two cycles") {
  for (int n : {9, 12, 15, 16, 20, 25, 30, 36, 42}) {
    const auto [r, c] = topo::torus_shape(n);
    CAPTURE(n);
    REQUIRE(r >= 3);
    double want = 0;
    for (int a = 0; a < r; ++a)
      for (int b = 0; b < c; ++b)
        if (a != 0 || b != 0)
          want = std::max(
              want, std::abs(1 + 2 * std::cos(2 * pi * a / r) + 2 * std::cos(2 * pi * b / c)) / 5);
    CHECK(std::abs(topo::analyse(one("torus", n, "uniform")).rho - want) < 1e-9);
  }
}

TEST_CASE("directed exponential graph: LAPACK's SVD, the circulant closed form, power iteration") {
  for (int n = 3; n <= 40; ++n) {
    CAPTURE(n);
    const topo::Topology t = one("exponential", n);
    CHECK(t.symmetric() == (n == 3));  // on 3 peers it is the complete graph
    CHECK(std::abs(topo::analyse(t).rho - circulant_exponential_rho(n)) < 1e-9);
  }
  for (int k = 2; k <= 6; ++k) {
    const int n = 1 << k;
    CAPTURE(n);
    const topo::Topology t = one("exponential", n);
    CHECK(std::abs(topo::analyse(t).rho - power_iteration_rho(t)) < 1e-7);
  }
}

TEST_CASE("one-peer exponential: the period's product is exactly J/n for n = 8 and 16") {
  for (int n : {8, 16}) {
    CAPTURE(n);
    const auto period = topo::make({"one-peer-exponential", n, "metropolis", 0, 0});
    const int tau = static_cast<int>(std::lround(std::log2(n)));
    REQUIRE(static_cast<int>(period.size()) == tau);
    const std::vector<double> product = topo::period_product(period);
    double max_error = 0;
    for (double v : product) max_error = std::max(max_error, std::abs(v - 1.0 / n));
    CHECK(max_error < 1e-12);
    const topo::Spectrum s = topo::analyse_period(period);
    CHECK(s.rho < 1e-12);
    CHECK(s.rounds_1000x == tau);
  }
  // Not a power of two: not exact, and the rounds come in whole periods.
  const auto period = topo::make({"one-peer-exponential", 6, "metropolis", 0, 0});
  REQUIRE(period.size() == 3);
  const topo::Spectrum s = topo::analyse_period(period);
  CHECK(s.rho > 1e-3);
  CHECK(s.rho < 1);
  CHECK(s.rounds_1000x == 3 * rounds_for(s.rho));
}

TEST_CASE("a matrix that never mixes has rho 1 and never reaches 1000x") {
  // Round 1 of the one-peer exponential graph on 8 peers alone links i and i + 2 only.
  const auto period = topo::make({"one-peer-exponential", 8, "metropolis", 0, 0});
  const topo::Spectrum s = topo::analyse(period[1]);
  CHECK(std::abs(s.rho - 1) < 1e-12);
  CHECK(s.rounds_1000x == std::numeric_limits<double>::infinity());
}
