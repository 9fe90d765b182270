#include "dp/skellam.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "dp/checks.h"
#include "dp/log_math.h"
#include "dp/value_stream.h"
#include "runtime/core/error.h"

namespace dpg::dp {
namespace {

using checks::bad_argument;
using checks::check_delta;
using checks::check_q;
using checks::check_steps;
using checks::str;
using logmath::kInf;
using logmath::kNaN;

// ---------------------------------------------------------------------------------------------
// Uniforms

// Value x's words (dp/value_stream.h): one reserved block, then its overflow sub-stream.
constexpr StreamTags kTags{1, 2, 3};
constexpr std::size_t kBlocksPerValue = 1;

inline double uniform53(std::uint64_t w) {  // in (0, 1), never 0 nor 1
  return (static_cast<double>(w >> 11) + 0.5) * 0x1.0p-53;
}

class Uniforms {
 public:
  explicit Uniforms(ValueWords& w) : w_(w) {}
  double next() { return uniform53(w_.next()); }

 private:
  ValueWords& w_;
};

// ---------------------------------------------------------------------------------------------
// Poisson

constexpr double kInversionBelow = 10.0;  // inversion below, PTRS at and above
constexpr int kSmallK = 16;               // log k! from the table below, Loader's form above

// log k! for k < kSmallK.
const std::array<double, kSmallK>& log_factorials() {
  static const std::array<double, kSmallK> table = [] {
    std::array<double, kSmallK> t{};
    for (int k = 1; k < kSmallK; ++k) t[k] = t[k - 1] + std::log(static_cast<double>(k));
    return t;
  }();
  return table;
}

// stirlerr(n) = log n! - (n + 1/2) log n + n - log(2 pi) / 2 for n >= 16, by the Stirling series
// (Loader 2000; R's dpois): the first omitted term is below 1e-16 at n = 16.
double stirlerr(double n) {
  constexpr double s0 = 1.0 / 12, s1 = 1.0 / 360, s2 = 1.0 / 1260, s3 = 1.0 / 1680,
                   s4 = 1.0 / 1188;
  const double nn = n * n;
  if (n > 500) return (s0 - s1 / nn) / n;
  if (n > 80) return (s0 - (s1 - s2 / nn) / nn) / n;
  if (n > 35) return (s0 - (s1 - (s2 - s3 / nn) / nn) / nn) / n;
  return (s0 - (s1 - (s2 - (s3 - s4 / nn) / nn) / nn) / nn) / n;
}

// bd0(x, m) = x log(x / m) + m - x, the deviance, without cancellation near x = m (Loader 2000):
// with v = (x - m) / (x + m) it is (x - m) v + 2 x sum_{j>=1} v^(2j+1) / (2j + 1).
double bd0(double x, double m) {
  const double d = x - m;  // exact: both are doubles within a factor 2 of each other here
  if (std::fabs(d) < 0.1 * (x + m)) {
    double v = d / (x + m);
    double s = d * v;
    double ej = 2 * x * v;
    v *= v;
    for (int j = 1; j < 1000; ++j) {
      ej *= v;
      const double s1 = s + ej / (2 * j + 1);
      if (s1 == s) return s1;
      s = s1;
    }
    return s;
  }
  return x * std::log(x / m) + m - x;
}

struct Poisson {
  explicit Poisson(double mu) : mu(mu) {
    if (mu < kInversionBelow) {
      p0 = std::exp(-mu);
    } else {
      const double slam = std::sqrt(mu);
      log_mu = std::log(mu);
      b = 0.931 + 2.53 * slam;
      a = -0.059 + 0.02483 * b;
      log_inv_alpha = std::log(1.1239 + 1.1328 / (b - 3.4));
      vr = 0.9277 - 3.6224 / (b - 2);
    }
  }

  // log P(K = k), K ~ Poisson(mu), k >= 0 an integer-valued double.
  double log_pmf(double k) const {
    if (k < kSmallK) return -mu + k * log_mu - log_factorials()[static_cast<int>(k)];
    return -stirlerr(k) - bd0(k, mu) - 0.5 * std::log(2 * std::numbers::pi * k);
  }

  std::int64_t draw(Uniforms& u) const {
    if (mu < kInversionBelow) {
      // Sequential search of the CDF; stops where the CDF no longer grows in double (a mass
      // below 1e-16 is left to the last k).
      const double v = u.next();
      double p = p0;
      double cdf = p;
      std::int64_t k = 0;
      while (v > cdf) {
        ++k;
        p *= mu / static_cast<double>(k);
        const double next = cdf + p;
        if (next == cdf) break;
        cdf = next;
      }
      return k;
    }
    // PTRS (Hörmann 1993), as numpy's random_poisson_ptrs.
    for (;;) {
      const double uu = u.next() - 0.5;
      const double v = u.next();
      const double us = 0.5 - std::fabs(uu);
      const double k = std::floor((2 * a / us + b) * uu + mu + 0.43);
      if (us >= 0.07 && v <= vr) return static_cast<std::int64_t>(k);
      // k beyond 2^53 has probability 0 in double at any mu here; the bound keeps the cast
      // below defined.
      if (k < 0 || k > 0x1.0p53 || (us < 0.013 && v > us)) continue;
      if (std::log(v) + log_inv_alpha - std::log(a / (us * us) + b) <= log_pmf(k))
        return static_cast<std::int64_t>(k);
    }
  }

  double mu;
  double p0 = 0, log_mu = 0, a = 0, b = 0, log_inv_alpha = 0, vr = 0;
};

// ---------------------------------------------------------------------------------------------
// Accounting

void check_order(double alpha) {
  if (!(alpha > 1.0 && std::isfinite(alpha)))
    bad_argument("alpha (RDP order) must be finite and > 1, got " + str(alpha));
}

void check_mu(double mu) {
  if (!(mu > 0.0 && std::isfinite(mu)))
    bad_argument("mu (Skellam Poisson mean) must be finite and > 0, got " + str(mu));
}

void check_sensitivity(double v, const char* name, bool positive) {
  if (!(std::isfinite(v) && (positive ? v > 0.0 : v >= 0.0)))
    bad_argument(std::string(name) + " (sensitivity) must be finite and " +
                 (positive ? "> 0" : ">= 0") + ", got " + str(v));
}

// Integer orders 2..256, then a few larger ones: the optimum of a long run at small epsilon can
// pass 256.
const std::vector<double>& skellam_orders() {
  static const std::vector<double> orders = [] {
    std::vector<double> v;
    for (int a = 2; a <= 256; ++a) v.push_back(a);
    for (int a : {288, 320, 384, 448, 512, 768, 1024}) v.push_back(a);
    return v;
  }();
  return orders;
}

// Epsilon without argument checks (the callers check).
PrivacySpent epsilon_unchecked(std::span<const PoissonSkellam> history, double delta) {
  const std::vector<double>& orders = skellam_orders();
  const int max_order = static_cast<int>(orders.back());
  std::vector<double> rdp(orders.size(), 0.0);
  bool any = false;
  std::vector<double> base(static_cast<std::size_t>(max_order) + 1, 0.0);
  for (const PoissonSkellam& s : history) {
    if (s.steps == 0 || s.q == 0.0) continue;
    any = true;
    for (int j = 2; j <= max_order; ++j) base[j] = skellam_rdp(j, s.mu, s.l1, s.l2);
    const auto curve = [&base](int j) { return base[static_cast<std::size_t>(j)]; };
    for (std::size_t k = 0; k < orders.size(); ++k) {
      rdp[k] += subsampled_rdp(static_cast<int>(orders[k]), s.q, curve) *
                static_cast<double>(s.steps);
    }
  }
  if (!any) return {0.0, kNaN};
  return rdp_to_epsilon(orders, rdp, delta);
}

PrivacySpent epsilon_unchecked(double q, double mu, double l1, double l2, long long steps,
                               double delta) {
  const PoissonSkellam segment{q, mu, l1, l2, steps};
  return epsilon_unchecked({&segment, 1}, delta);
}

}  // namespace

void add_skellam(std::span<std::uint32_t> out, double mu, const NoiseKey& key,
                 std::uint64_t stream, std::size_t first) {
  if (!(mu >= 0.0 && mu <= kMaxSkellamMu))
    bad_argument("mu (Skellam Poisson mean) must be finite and in [0, 1e13], got " + str(mu));
  const std::size_t n = out.size();
  if (n == 0) return;
  if (mu == 0.0) return;
  const Poisson poisson(mu);
  for_each_value(key, stream, kTags, kBlocksPerValue, first, n, "skellam noise",
                 [&](std::size_t i, ValueWords& w) {
                   Uniforms u(w);
                   const std::int64_t x = poisson.draw(u);
                   const std::int64_t y = poisson.draw(u);
                   out[i] += static_cast<std::uint32_t>(x - y);  // modulo 2^32
                 });
}

double skellam_rdp(double alpha, double mu, double l1, double l2) {
  check_order(alpha);
  check_mu(mu);
  check_sensitivity(l1, "l1", false);
  check_sensitivity(l2, "l2", false);
  // Agarwal, Kairouz, Liu 2021 with the variance V = 2 mu of Sk(mu) = Poisson(mu) - Poisson(mu).
  const double v = 2.0 * mu;
  const double l2sq = l2 * l2;
  return alpha * l2sq / (2.0 * v) +
         std::min(((2.0 * alpha - 1.0) * l2sq + 6.0 * l1) / (4.0 * v * v), 3.0 * l1 / (2.0 * v));
}

double subsampled_rdp(int alpha, double q, const std::function<double(int)>& rdp) {
  if (alpha < 2) bad_argument("alpha (RDP order) must be an integer >= 2, got " +
                              std::to_string(alpha));
  check_q(q, "q");
  if (!rdp) bad_argument("rdp (the RDP curve) must be callable");
  const auto eps = [&rdp](int j) {
    const double e = rdp(j);
    if (!(e >= 0.0))
      bad_argument("rdp(" + std::to_string(j) + ") must be >= 0 (or +inf), got " + str(e));
    return e;
  };
  if (q == 0.0) return 0.0;
  const double at_alpha = eps(alpha);
  if (q == 1.0) return at_alpha;

  // Zhu and Wang 2019's general bound, every term in log space:
  //   l = 0, 1 : (1-q)^(alpha-1) (1 + (alpha-1) q)
  //   l = 2    : C(alpha, 2) q^2 (1-q)^(alpha-2) e^{eps(2)}
  //   l >= 3   : 3 C(alpha, l) q^l (1-q)^(alpha-l) e^{(l-1) eps(l)}
  const double log_q = std::log(q);
  const double log_1mq = std::log1p(-q);
  const double a = alpha;
  std::vector<double> terms;
  terms.reserve(static_cast<std::size_t>(alpha));
  terms.push_back((a - 1.0) * log_1mq + std::log1p((a - 1.0) * q));
  double log_binom = std::log(a);  // log C(alpha, 1), then updated by C(a, l) / C(a, l-1)
  for (int l = 2; l <= alpha; ++l) {
    const double dl = l;
    log_binom += std::log((a - dl + 1.0) / dl);
    const double e = l == alpha ? at_alpha : eps(l);
    double t = log_binom + dl * log_q + (a - dl) * log_1mq + (dl - 1.0) * e;
    if (l >= 3) t += std::log(3.0);
    terms.push_back(t);
  }
  const double top = *std::max_element(terms.begin(), terms.end());
  if (top == kInf) return at_alpha;  // the bound is infinite; eps(alpha) may not be
  double sum = 0.0;
  for (double t : terms) sum += std::exp(t - top);
  const double bound = (top + std::log(sum)) / (a - 1.0);
  return std::min(bound, at_alpha);
}

PrivacySpent skellam_epsilon(double q, double mu, double l1, double l2, long long steps,
                             double delta) {
  check_q(q, "q");
  check_mu(mu);
  check_sensitivity(l1, "l1", false);
  check_sensitivity(l2, "l2", false);
  check_steps(steps, "steps");
  check_delta(delta, "delta");
  if (steps == 0 || q == 0.0) return {0.0, kNaN};
  return epsilon_unchecked(q, mu, l1, l2, steps, delta);
}

PrivacySpent skellam_epsilon(std::span<const PoissonSkellam> history, double delta) {
  for (const PoissonSkellam& s : history) {
    check_q(s.q, "q");
    check_mu(s.mu);
    check_sensitivity(s.l1, "l1", false);
    check_sensitivity(s.l2, "l2", false);
    check_steps(s.steps, "steps");
  }
  check_delta(delta, "delta");
  return epsilon_unchecked(history, delta);
}

double calibrate_skellam_mu(double q, long long steps, double delta, double target_epsilon,
                            double l1, double l2) {
  check_q(q, "q");
  if (q == 0.0) bad_argument("q (sample rate) must be > 0 to calibrate, got 0");
  if (steps < 1) bad_argument("steps must be >= 1 to calibrate, got " + std::to_string(steps));
  check_delta(delta, "delta");
  if (!(target_epsilon > 0.0 && std::isfinite(target_epsilon)))
    bad_argument("target_epsilon must be finite and > 0, got " + str(target_epsilon));
  check_sensitivity(l1, "l1", true);
  check_sensitivity(l2, "l2", true);
  const auto eps = [&](double mu) {
    return epsilon_unchecked(q, mu, l1, l2, steps, delta).epsilon;
  };
  // Epsilon falls as mu grows (each RDP order does, and everything after is monotone): bracket
  // the root by factors of 4 from mu = l2^2 (sigma = 1.4 in Gaussian terms), then bisect.
  double hi = std::clamp(l2 * l2, 1e-6, kMaxSkellamMu);
  double lo = hi;
  if (eps(hi) > target_epsilon) {
    for (;;) {
      if (hi == kMaxSkellamMu) {
        bad_argument("target_epsilon " + str(target_epsilon) +
                     " cannot be met with mu <= 1e13: epsilon there is " +
                     str(eps(kMaxSkellamMu)) + " (q " + str(q) + ", " + std::to_string(steps) +
                     " steps, delta " + str(delta) + ", l1 " + str(l1) + ", l2 " + str(l2) + ")");
      }
      lo = hi;
      hi = std::min(hi * 4.0, kMaxSkellamMu);
      if (eps(hi) <= target_epsilon) break;
    }
  } else {
    do {
      hi = lo;
      lo = hi / 4.0;
      if (lo < 1e-30)
        bad_argument("target_epsilon " + str(target_epsilon) + " is met by any mu > 0");
    } while (eps(lo) <= target_epsilon);
  }
  // Invariant: eps(lo) > target >= eps(hi).
  while (hi - lo > 1e-4 * hi) {
    const double mid = 0.5 * (lo + hi);
    if (eps(mid) <= target_epsilon) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi;
}

}  // namespace dpg::dp
