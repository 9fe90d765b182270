// The Skellam mechanism (dp/skellam.h): the sampler's moments and shape against Sk(mu) computed
// here from its definition (the convolution of two Poisson pmfs), its counter-based determinism
// and modular arithmetic; the RDP bound against its closed form and the Gaussian's; the
// subsampling bound against the exact subsampled Gaussian (dp/rdp.h); the accountant's
// monotonicity and the calibration's round trip.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "dp/rdp.h"
#include "dp/secure_noise.h"
#include "dp/skellam.h"
#include "runtime/core/error.h"
#include "tests/unit/dp/errors.h"

namespace dp = dpg::dp;
using dpg::testing::contains;
using dpg::testing::error_message;

namespace {

constexpr std::size_t kDraws = 200'000;

// Sk(mu) draws: add_skellam on zeros, decoded as two's-complement int32.
std::vector<std::int64_t> draws(double mu, std::size_t n, std::uint64_t key = 42,
                                std::uint64_t stream = 7) {
  std::vector<std::uint32_t> buf(n, 0);
  dp::add_skellam(buf, mu, dp::NoiseKey::fixed(key), stream);
  std::vector<std::int64_t> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<std::int32_t>(buf[i]);
  return x;
}

// P(Sk(mu) = k) for |k| <= kmax: sum_j Pois(j + |k|) Pois(j), the Poisson pmf from lgamma (long
// double), summed over j up to mu + 40 sqrt(mu) + 40.
std::vector<long double> skellam_pmf(double mu, int kmax) {
  const int jmax = static_cast<int>(mu + 40 * std::sqrt(mu) + 40) + kmax;
  std::vector<long double> pois(static_cast<std::size_t>(jmax) + 1);
  for (int j = 0; j <= jmax; ++j) {
    const long double lj = j;
    pois[j] = std::exp(-static_cast<long double>(mu) + lj * std::log(static_cast<long double>(mu)) -
                       std::lgamma(lj + 1));
  }
  std::vector<long double> pmf(static_cast<std::size_t>(kmax) + 1, 0);
  for (int k = 0; k <= kmax; ++k)
    for (int j = 0; j + k <= jmax; ++j) pmf[k] += pois[j + k] * pois[j];
  return pmf;  // pmf[|k|]
}

// Pearson's chi-squared statistic of the draws against Sk(mu), cells of expected count >= 20 and
// the two tails merged into one cell each; dof = cells - 1.
struct Chi2 {
  double stat;
  int dof;
};
Chi2 chi_squared(const std::vector<std::int64_t>& x, double mu) {
  const int kmax = static_cast<int>(20 * std::sqrt(2 * mu) + 20);
  const std::vector<long double> pmf = skellam_pmf(mu, kmax);
  const double n = static_cast<double>(x.size());
  int edge = 0;  // cells -edge..edge are single values
  while (edge < kmax && pmf[edge + 1] * n >= 20) ++edge;
  std::vector<double> observed(2 * edge + 3, 0);  // [lower tail, -edge..edge, upper tail]
  for (std::int64_t v : x) {
    const std::int64_t c = std::clamp<std::int64_t>(v, -edge - 1, edge + 1) + edge + 1;
    observed[static_cast<std::size_t>(c)] += 1;
  }
  long double body = 0;
  for (int k = -edge; k <= edge; ++k) body += pmf[std::abs(k)];
  const long double tail = (1 - body) / 2;
  double stat = 0;
  const int cells = static_cast<int>(observed.size());
  for (int c = 0; c < cells; ++c) {
    const int k = c - edge - 1;
    const long double p = (c == 0 || c + 1 == cells) ? tail : pmf[std::abs(k)];
    const double expected = static_cast<double>(p) * n;
    if (expected < 1e-9) {
      CHECK(observed[c] == 0);
      continue;
    }
    stat += (observed[c] - expected) * (observed[c] - expected) / expected;
  }
  return {stat, cells - 1};
}

std::vector<std::uint32_t> noised(std::size_t n, double mu, std::uint64_t key, std::uint64_t stream,
                                  std::uint32_t init = 0) {
  std::vector<std::uint32_t> buf(n, init);
  dp::add_skellam(buf, mu, dp::NoiseKey::fixed(key), stream);
  return buf;
}

}  // namespace

TEST_CASE("sampler: mean 0 and variance 2 mu within 5 standard errors") {
  std::uint64_t stream = 100;  // a stream per mu: the samples are independent of each other
  for (double mu : {0.3, 7.0, 25.0, 1e3, 1e6, 1e10}) {
    CAPTURE(mu);
    const std::vector<std::int64_t> x = draws(mu, kDraws, 42, ++stream);
    const double n = static_cast<double>(x.size());
    long double sum = 0;
    for (std::int64_t v : x) sum += v;
    const double mean = static_cast<double>(sum / n);
    long double ss = 0;
    for (std::int64_t v : x) ss += (v - static_cast<long double>(mean)) * (v - mean);
    const double var = static_cast<double>(ss / (n - 1));
    const double s2 = 2 * mu;                                // variance
    const double se_mean = std::sqrt(s2 / n);
    const double se_var = std::sqrt((s2 + 2 * s2 * s2) / n);  // (mu4 - sigma^4) / n, kappa4 = 2 mu
    CAPTURE(mean);
    CAPTURE(var);
    CHECK(std::fabs(mean) < 5 * se_mean);
    CHECK(std::fabs(var - s2) < 5 * se_var);
  }
}

TEST_CASE("sampler: the distribution is Sk(mu) (chi-squared against the exact pmf)") {
  // Inversion below mu = 10, PTRS from 10 (25 and 1000 cover its squeeze and its log test). Four
  // million draws make the test sensitive to a squeeze that accepts 2% too much.
  for (double mu : {0.3, 7.0, 10.0, 25.0, 1e3}) {
    CAPTURE(mu);
    const Chi2 c = chi_squared(draws(mu, 4'000'000, 5, 11), mu);
    CAPTURE(c.stat);
    CAPTURE(c.dof);
    CHECK(c.dof >= 2);
    // Mean dof, standard deviation sqrt(2 dof): 5 of them is a 3e-6 chance for a right sampler;
    // a wrong constant in PTRS moves the statistic by hundreds.
    CHECK(c.stat < c.dof + 5 * std::sqrt(2.0 * c.dof));
  }
}

TEST_CASE("sampler: counter-based, keyed, and split ranges match the whole") {
  constexpr std::size_t n = 5000;
  for (double mu : {0.3, 10.0, 1e9}) {  // 10: PTRS at its worst acceptance, overflow sub-streams
    CAPTURE(mu);
    const auto whole = noised(n, mu, 3, 9);
    CHECK(whole == noised(n, mu, 3, 9));
    CHECK(whole != noised(n, mu, 3, 10));
    CHECK(whole != noised(n, mu, 4, 9));
    for (std::size_t cut : {std::size_t{1}, std::size_t{255}, std::size_t{256}, std::size_t{1234},
                            n - 1}) {
      CAPTURE(cut);
      std::vector<std::uint32_t> parts(n, 0);
      const dp::NoiseKey key = dp::NoiseKey::fixed(3);
      dp::add_skellam(std::span(parts).subspan(cut), mu, key, 9, cut);
      dp::add_skellam(std::span(parts).first(cut), mu, key, 9, 0);
      CHECK(parts == whole);
    }
    // Value by value: each draw depends on its own position only.
    std::vector<std::uint32_t> one(1, 0);
    for (std::size_t i : {std::size_t{0}, std::size_t{777}, n - 1}) {
      one[0] = 0;
      dp::add_skellam(one, mu, dp::NoiseKey::fixed(3), 9, i);
      CHECK(one[0] == whole[i]);
    }
  }
  // Different streams are not shifted copies of each other.
  const auto a = noised(1000, 1e6, 1, 1);
  const auto b = noised(1000, 1e6, 1, 2);
  int equal = 0;
  for (std::size_t i = 0; i < a.size(); ++i) equal += a[i] == b[i];
  CHECK(equal < 5);
}

TEST_CASE("sampler: mu = 0 adds nothing; additions wrap modulo 2^32") {
  std::vector<std::uint32_t> buf = {0u, 1u, 0xFFFFFFFFu, 12345u};
  const auto before = buf;
  dp::add_skellam(buf, 0.0, dp::NoiseKey::fixed(1), 1);
  CHECK(buf == before);

  const auto from_zero = noised(2000, 7.0, 8, 8);
  const auto from_max = noised(2000, 7.0, 8, 8, 0xFFFFFFFFu);
  int wrapped = 0;
  for (std::size_t i = 0; i < from_zero.size(); ++i) {
    CHECK(from_max[i] == static_cast<std::uint32_t>(from_zero[i] - 1u));  // -1 + noise mod 2^32
    wrapped += static_cast<std::int32_t>(from_zero[i]) > 0 && from_max[i] < 0x80000000u;
  }
  CHECK(wrapped > 500);  // every positive draw carried out of 0xFFFFFFFF
  // And a negative draw added to 0 wraps to the top of the range.
  CHECK(std::any_of(from_zero.begin(), from_zero.end(), [](std::uint32_t v) {
    return v >= 0x80000000u;
  }));
}

TEST_CASE("sampler: arguments are checked and named") {
  std::vector<std::uint32_t> buf(4, 0);
  const dp::NoiseKey key = dp::NoiseKey::fixed(1);
  for (double mu : {-1.0, std::nan(""), std::numeric_limits<double>::infinity(), 2e13}) {
    CAPTURE(mu);
    CHECK(contains(error_message([&] { dp::add_skellam(buf, mu, key, 0); }), "mu"));
  }
  CHECK(contains(error_message([&] { dp::add_skellam(buf, 1.0, key, 0, (1ULL << 32) - 2); }),
                 "2^32"));
  dp::add_skellam(buf, dp::kMaxSkellamMu, key, 0, (1ULL << 32) - 4);  // the last values are fine
}

TEST_CASE("sampler: 200,000 values at mu = 1e9") {
  std::vector<std::uint32_t> buf(kDraws, 0);
  const dp::NoiseKey key = dp::NoiseKey::fixed(99);
  dp::add_skellam(buf, 1e9, key, 0);  // warm-up
  double best = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    dp::add_skellam(buf, 1e9, key, static_cast<std::uint64_t>(rep + 1));
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                              .count());
  }
  MESSAGE("add_skellam, 200000 values at mu = 1e9: " << best * 1e3 << " ms (best of 5)");
  CHECK(best < 0.5);  // generous for loaded CI machines
}

TEST_CASE("skellam_rdp: the closed form, monotone, and the Gaussian's at large mu") {
  // Variance V = 2 mu: alpha l2^2 / (2V) + min(((2 alpha - 1) l2^2 + 6 l1) / (4 V^2), 3 l1 / (2V)).
  CHECK(dp::skellam_rdp(2, 1, 1, 1) == doctest::Approx(0.5 + 9.0 / 16));   // the first branch
  CHECK(dp::skellam_rdp(2, 0.5, 1, 1) == doctest::Approx(1.0 + 1.5));      // the second
  CHECK(dp::skellam_rdp(3, 1e4, 20, 10) ==
        doctest::Approx(3 * 100 / 4e4 + (5 * 100 + 120) / (16 * 1e8)));
  double prev = 0;
  for (int a = 2; a <= 300; ++a) {
    const double r = dp::skellam_rdp(a, 1e6, 5e4, 1e3);
    CHECK(r > prev);
    prev = r;
  }
  CHECK(dp::skellam_rdp(8, 1e6, 5e4, 2e3) > dp::skellam_rdp(8, 1e6, 5e4, 1e3));
  CHECK(dp::skellam_rdp(8, 1e6, 6e4, 1e3) > dp::skellam_rdp(8, 1e6, 5e4, 1e3));
  CHECK(dp::skellam_rdp(8, 2e6, 5e4, 1e3) < dp::skellam_rdp(8, 1e6, 5e4, 1e3));
  CHECK(dp::skellam_rdp(8, 0.01, 5, 1) < dp::skellam_rdp(8, 0.001, 5, 1));

  const double l2 = 1000, mu = 1e8;
  for (double l1 : {1e3, 3e4, 1e6}) {
    for (int a : {2, 8, 32, 256, 1024}) {
      CAPTURE(l1);
      CAPTURE(a);
      const double gauss = a * l2 * l2 / (2 * 2 * mu);
      const double r = dp::skellam_rdp(a, mu, l1, l2);
      CHECK(r >= gauss);
      CHECK(r <= 1.01 * gauss);
    }
  }

  CHECK(contains(error_message([] { dp::skellam_rdp(1, 1, 1, 1); }), "alpha"));
  CHECK(contains(error_message([] { dp::skellam_rdp(2, 0, 1, 1); }), "mu"));
  CHECK(contains(error_message([] { dp::skellam_rdp(2, std::nan(""), 1, 1); }), "mu"));
  CHECK(contains(error_message([] { dp::skellam_rdp(2, 1, -1, 1); }), "l1"));
  CHECK(contains(error_message([] { dp::skellam_rdp(2, 1, 1, HUGE_VAL); }), "l2"));
}

TEST_CASE("subsampled_rdp: the ends, the Gaussian, and log space") {
  const auto gauss = [](double sigma) {
    return [sigma](int j) { return j / (2 * sigma * sigma); };
  };
  CHECK(dp::subsampled_rdp(7, 1.0, gauss(1.3)) == gauss(1.3)(7));
  CHECK(dp::subsampled_rdp(7, 0.0, gauss(1.3)) == 0.0);

  // The bound written out term by term at alpha = 5, q = 0.3 for the curve rdp(j) = j / 10.
  {
    const double q = 0.3, p = 0.7;
    const auto e = [](int j) { return j / 10.0; };
    const double sum = std::pow(p, 4) * (1 + 4 * q) + 10 * q * q * std::pow(p, 3) * std::exp(e(2)) +
                       3 * (10 * std::pow(q, 3) * p * p * std::exp(2 * e(3)) +
                            5 * std::pow(q, 4) * p * std::exp(3 * e(4)) +
                            std::pow(q, 5) * std::exp(4 * e(5)));
    CHECK(dp::subsampled_rdp(5, q, e) == doctest::Approx(std::log(sum) / 4).epsilon(1e-13));
  }

  // Zhu-Wang's general bound is the exact binomial expansion of the subsampled Gaussian with a
  // factor 3 on the terms l >= 3: never below it, at most log(3) / (alpha - 1) above it. Within a
  // factor 3 of it where the l = 2 term carries the exact value; not where the tripled l >= 3
  // terms do (large alpha q sigma^2, the last two cases: factors 3.3 and 4.9).
  struct Case {
    double q, sigma;
    int alpha;
    bool within3;
  };
  for (const Case c : {Case{0.01, 1.0, 8, true}, Case{0.01, 0.8, 32, true},
                       Case{0.0683, 2.46, 4, true}, Case{0.0683, 2.46, 8, true},
                       Case{0.04, 1.5, 16, true}, Case{0.1, 1.0, 4, true},
                       Case{0.3, 2.0, 2, true}, Case{0.3, 2.0, 64, true},
                       Case{0.5, 0.7, 12, true}, Case{0.001, 1.0, 32, true},
                       Case{0.0683, 2.46, 16, false}, Case{0.001, 5.0, 256, false}}) {
    CAPTURE(c.q);
    CAPTURE(c.sigma);
    CAPTURE(c.alpha);
    const double exact = dp::rdp_subsampled_gaussian(c.q, c.sigma, c.alpha);
    const double bound = dp::subsampled_rdp(c.alpha, c.q, gauss(c.sigma));
    CHECK(bound >= exact * (1 - 1e-12));
    if (c.within3) CHECK(bound <= 3 * exact);
    CHECK(bound <= exact + std::log(3.0) / (c.alpha - 1) + 1e-12);
    if (c.alpha == 2) CHECK(bound == doctest::Approx(exact).epsilon(1e-12));  // no l >= 3 terms
  }

  // Terms far beyond the double range neither overflow nor swamp: the bound is capped at
  // rdp(alpha), and an infinite curve stays infinite.
  const double huge = dp::subsampled_rdp(1024, 0.2, [](int j) { return 50.0 * j; });
  CHECK(std::isfinite(huge));
  CHECK(huge <= 50.0 * 1024);
  CHECK(huge > 0.9 * 50.0 * 1024);
  CHECK(dp::subsampled_rdp(16, 0.2, [](int) { return HUGE_VAL; }) == HUGE_VAL);
  // ... and tiny ones are not lost: q = 1e-6 keeps its q^2 scaling.
  const double t1 = dp::subsampled_rdp(4, 1e-6, gauss(1.0));
  const double t2 = dp::subsampled_rdp(4, 2e-6, gauss(1.0));
  CHECK(t1 > 0);
  CHECK(t2 / t1 == doctest::Approx(4.0).epsilon(1e-4));

  CHECK(contains(error_message([&] { dp::subsampled_rdp(1, 0.1, gauss(1)); }), "alpha"));
  CHECK(contains(error_message([&] { dp::subsampled_rdp(4, 1.1, gauss(1)); }), "q"));
  CHECK(contains(error_message([&] { dp::subsampled_rdp(4, 0.1, [](int) { return -1.0; }); }),
                 "rdp("));
  CHECK(contains(error_message([&] { dp::subsampled_rdp(4, 0.1, [](int) { return NAN; }); }),
                 "rdp("));
}

TEST_CASE("skellam_epsilon: monotone in steps and q, zero for nothing") {
  const double l2 = 65536 + 451, l1 = 451.0 * 65536 + 203530;
  const double mu = (2.46 * l2) * (2.46 * l2) / 2;
  double prev = 0;
  for (long long steps : {1LL, 10LL, 100LL, 586LL, 2000LL}) {
    const double e = dp::skellam_epsilon(0.0683, mu, l1, l2, steps, 1e-5).epsilon;
    CHECK(e > prev);
    prev = e;
  }
  prev = 0;
  for (double q : {0.001, 0.01, 0.0683, 0.2, 1.0}) {
    const double e = dp::skellam_epsilon(q, mu, l1, l2, 586, 1e-5).epsilon;
    CHECK(e > prev);
    prev = e;
  }
  const dp::PrivacySpent none = dp::skellam_epsilon(0.0683, mu, l1, l2, 0, 1e-5);
  CHECK(none.epsilon == 0.0);
  CHECK(std::isnan(none.best_alpha));
  CHECK(dp::skellam_epsilon(0.0, mu, l1, l2, 586, 1e-5).epsilon == 0.0);
  // Never below the Gaussian of the same variance by the exact RDP accountant (same orders).
  for (double sigma : {0.8, 1.5, 2.46, 6.0}) {
    CAPTURE(sigma);
    const double m = (sigma * l2) * (sigma * l2) / 2;
    std::vector<double> orders;
    for (int a = 2; a <= 256; ++a) orders.push_back(a);
    for (int a : {288, 320, 384, 448, 512, 768, 1024}) orders.push_back(a);
    const auto rdp = dp::rdp_subsampled_gaussian(0.0683, sigma, 586, orders);
    const double g = dp::rdp_to_epsilon(orders, rdp, 1e-5).epsilon;
    CHECK(dp::skellam_epsilon(0.0683, m, l1, l2, 586, 1e-5).epsilon >= g);
  }
  CHECK(contains(error_message([&] { dp::skellam_epsilon(0.1, mu, l1, l2, -1, 1e-5); }), "steps"));
  CHECK(contains(error_message([&] { dp::skellam_epsilon(0.1, mu, l1, l2, 1, 0); }), "delta"));
  CHECK(contains(error_message([&] { dp::skellam_epsilon(-0.1, mu, l1, l2, 1, 1e-5); }), "q"));
  CHECK(contains(error_message([&] { dp::skellam_epsilon(0.1, -mu, l1, l2, 1, 1e-5); }), "mu"));
}

TEST_CASE("calibrate_skellam_mu: round trip, the reference figures, unreachable targets") {
  const double l2 = 65536 + 451, l1 = 451.0 * 65536 + 203530;
  struct Case {
    double q;
    long long steps;
    double target, l1, l2;
  };
  for (const Case c : {Case{0.0683, 586, 3.0, l1, l2}, Case{0.0683, 586, 8.0, l1, l2},
                       Case{0.01, 10000, 1.0, 100, 10}, Case{1.0, 10, 2.0, 3, 1},
                       Case{0.2, 50, 0.5, 1e3, 50}}) {
    CAPTURE(c.q);
    CAPTURE(c.steps);
    CAPTURE(c.target);
    const double mu = dp::calibrate_skellam_mu(c.q, c.steps, 1e-5, c.target, c.l1, c.l2);
    CAPTURE(mu);
    CHECK(dp::skellam_epsilon(c.q, mu, c.l1, c.l2, c.steps, 1e-5).epsilon <= c.target);
    CHECK(dp::skellam_epsilon(c.q, 0.99 * mu, c.l1, c.l2, c.steps, 1e-5).epsilon > c.target);
    CHECK(dp::skellam_epsilon(c.q, 0.9998 * mu, c.l1, c.l2, c.steps, 1e-5).epsilon > c.target);
  }

  // The figures the design notes quote: the Gaussian-equivalent sigma 2.46 at the default recipe,
  // and the mu calibrated for epsilon 3.
  const double mu246 = (2.46 * l2) * (2.46 * l2) / 2;
  const dp::PrivacySpent at246 = dp::skellam_epsilon(0.0683, mu246, l1, l2, 586, 1e-5);
  const auto t0 = std::chrono::steady_clock::now();
  const double mu3 = dp::calibrate_skellam_mu(0.0683, 586, 1e-5, 3.0, l1, l2);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const dp::PrivacySpent at3 = dp::skellam_epsilon(0.0683, mu3, l1, l2, 586, 1e-5);
  MESSAGE("mu(sigma 2.46) = " << mu246 << ": epsilon " << at246.epsilon << " at alpha "
                              << at246.best_alpha);
  MESSAGE("calibrated mu for epsilon 3 = " << mu3 << " (sigma-equivalent "
                                           << std::sqrt(2 * mu3) / l2 << "), epsilon "
                                           << at3.epsilon << " at alpha " << at3.best_alpha
                                           << ", in " << s * 1e3 << " ms");
  CHECK(s < 2.0);

  CHECK(contains(error_message([&] { dp::calibrate_skellam_mu(0.0683, 586, 1e-5, 1e-3, l1, l2); }),
                 "target_epsilon"));
  CHECK(contains(error_message([&] { dp::calibrate_skellam_mu(0.0683, 586, 1e-5, 0, l1, l2); }),
                 "target_epsilon"));
  CHECK(contains(error_message([&] { dp::calibrate_skellam_mu(0.0, 586, 1e-5, 3, l1, l2); }),
                 "q"));
  CHECK(contains(error_message([&] { dp::calibrate_skellam_mu(0.1, 0, 1e-5, 3, l1, l2); }),
                 "steps"));
  CHECK(contains(error_message([&] { dp::calibrate_skellam_mu(0.1, 5, 1e-5, 3, 0, l2); }), "l1"));
  CHECK(contains(error_message([&] { dp::calibrate_skellam_mu(0.1, 5, 1e-5, 3, l1, 0); }), "l2"));
}
