#include "dp/rdp.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "dp/checks.h"
#include "dp/log_math.h"
#include "runtime/core/error.h"

namespace dpg::dp {
namespace {

using logmath::kInf;
using logmath::kNaN;
using logmath::log_add;
using logmath::log_erfc;
using logmath::log_sub;

using checks::bad_argument;
using checks::check_delta;
using checks::check_q;
using checks::check_sigma;
using checks::check_steps;
using checks::str;

bool is_integer_order(double alpha) {
  return alpha == std::floor(alpha) && alpha < 9007199254740992.0;  // 2^53
}

// log(A_alpha) for integer alpha: the binomial expansion of Mironov et al. 2019, Section 3.3,
//   A = sum_{i=0}^{alpha} C(alpha, i) q^i (1-q)^(alpha-i) exp((i^2 - i) / (2 sigma^2)).
double log_a_int(double q, double sigma, long long alpha) {
  const double log_q = std::log(q);
  const double log_1mq = std::log1p(-q);
  const double two_s2 = 2.0 * sigma * sigma;
  double log_a = -kInf;
  double log_binom = 0.0;  // log C(alpha, i), updated by the ratio C(a, i+1) / C(a, i)
  for (long long i = 0; i <= alpha; ++i) {
    const double di = static_cast<double>(i);
    const double s = log_binom + di * log_q + static_cast<double>(alpha - i) * log_1mq +
                     (di * di - di) / two_s2;
    log_a = log_add(log_a, s);
    log_binom += std::log(static_cast<double>(alpha - i) / static_cast<double>(i + 1));
  }
  return log_a;
}

// log(A_alpha) for fractional alpha: the two-sided series of Mironov et al. 2019, Section 3.3,
// splitting the integral at z0 where the two Gaussians' mixture ratio crosses 1. Terms alternate
// in sign once i > alpha and decay polynomially; like Opacus we stop once both are below e^-30.
double log_a_frac(double q, double sigma, double alpha) {
  const double log_q = std::log(q);
  const double log_1mq = std::log1p(-q);
  const double two_s2 = 2.0 * sigma * sigma;
  const double sqrt2_sigma = std::numbers::sqrt2 * sigma;
  const double z0 = sigma * sigma * (log_1mq - log_q) + 0.5;  // sigma^2 log(1/q - 1) + 1/2
  const double log_half = -std::numbers::ln2;
  constexpr long long kMaxTerms = 100'000'000;

  double log_a0 = -kInf;
  double log_a1 = -kInf;
  double log_abs_coef = 0.0;  // log |C(alpha, i)|
  bool positive = true;       // sign of C(alpha, i)
  for (long long i = 0; i < kMaxTerms; ++i) {
    const double di = static_cast<double>(i);
    const double j = alpha - di;
    const double log_t0 = log_abs_coef + di * log_q + j * log_1mq;
    const double log_t1 = log_abs_coef + j * log_q + di * log_1mq;
    const double log_e0 = log_half + log_erfc((di - z0) / sqrt2_sigma);
    const double log_e1 = log_half + log_erfc((z0 - j) / sqrt2_sigma);
    const double log_s0 = log_t0 + (di * di - di) / two_s2 + log_e0;
    const double log_s1 = log_t1 + (j * j - j) / two_s2 + log_e1;
    if (positive) {
      log_a0 = log_add(log_a0, log_s0);
      log_a1 = log_add(log_a1, log_s1);
    } else {
      log_a0 = log_sub(log_a0, log_s0);
      log_a1 = log_sub(log_a1, log_s1);
    }
    if (std::isnan(log_a0) || std::isnan(log_a1)) return kNaN;
    if (std::max(log_s0, log_s1) < -30.0) return log_add(log_a0, log_a1);
    const double ratio = (alpha - di) / (di + 1.0);  // C(alpha, i+1) / C(alpha, i)
    if (ratio < 0) positive = !positive;
    log_abs_coef += std::log(std::fabs(ratio));
  }
  return kNaN;
}

void check_order(double alpha) {
  if (!(alpha > 1.0 && std::isfinite(alpha)))
    bad_argument("alpha (RDP order) must be finite and > 1, got " + str(alpha));
}

}  // namespace

const std::vector<double>& default_orders() {
  static const std::vector<double> orders = [] {
    std::vector<double> v;
    for (int x = 1; x < 100; ++x) v.push_back(1.0 + x / 10.0);  // as Python's 1 + x / 10.0
    for (int a = 12; a < 64; ++a) v.push_back(a);
    return v;
  }();
  return orders;
}

double rdp_subsampled_gaussian(double q, double sigma, double alpha) {
  check_q(q, "q");
  check_sigma(sigma, "sigma");
  check_order(alpha);
  if (q == 0.0) return 0.0;
  if (q == 1.0) return alpha / (2.0 * sigma * sigma);
  const double log_a = is_integer_order(alpha)
                           ? log_a_int(q, sigma, static_cast<long long>(alpha))
                           : log_a_frac(q, sigma, alpha);
  return log_a / (alpha - 1.0);
}

std::vector<double> rdp_subsampled_gaussian(double q, double sigma, long long steps,
                                            std::span<const double> orders) {
  check_steps(steps, "steps");
  std::vector<double> rdp;
  rdp.reserve(orders.size());
  for (double alpha : orders)
    rdp.push_back(rdp_subsampled_gaussian(q, sigma, alpha) * static_cast<double>(steps));
  return rdp;
}

PrivacySpent rdp_to_epsilon(std::span<const double> orders, std::span<const double> rdp,
                            double delta) {
  if (orders.empty()) bad_argument("orders must not be empty");
  if (orders.size() != rdp.size())
    bad_argument("orders and rdp must have the same length, got " +
                 std::to_string(orders.size()) + " and " + std::to_string(rdp.size()));
  check_delta(delta, "delta");
  for (double alpha : orders) check_order(alpha);
  const double log_delta = std::log(delta);
  PrivacySpent best{kInf, kNaN};
  bool any = false;
  for (size_t k = 0; k < orders.size(); ++k) {
    const double a = orders[k];
    const double eps = rdp[k] - (log_delta + std::log(a)) / (a - 1.0) + std::log((a - 1.0) / a);
    if (std::isnan(eps)) continue;
    if (!any || eps < best.epsilon) best = {eps, a};  // first minimum, as np.nanargmin
    any = true;
  }
  if (any) best.epsilon = std::max(best.epsilon, 0.0);
  return best;
}

bool at_grid_edge(std::span<const double> orders, double best_alpha) {
  if (orders.empty() || std::isnan(best_alpha)) return false;
  const auto [lo, hi] = std::minmax_element(orders.begin(), orders.end());
  return best_alpha == *lo || best_alpha == *hi;
}

PrivacySpent rdp_epsilon(std::span<const PoissonGaussian> history, double delta) {
  check_delta(delta, "delta");
  // RDP composes additively: one evaluation per distinct (q, sigma), weighted by its steps.
  std::vector<PoissonGaussian> groups;
  for (const PoissonGaussian& s : history) {
    check_q(s.q, "q");
    check_sigma(s.sigma, "sigma");
    check_steps(s.steps, "steps");
    if (s.q > 0.0 && s.steps > 0) groups.push_back(s);
  }
  if (groups.empty()) return {0.0, kNaN};
  std::sort(groups.begin(), groups.end(), [](const PoissonGaussian& a, const PoissonGaussian& b) {
    return a.q != b.q ? a.q < b.q : a.sigma < b.sigma;
  });
  const auto& orders = default_orders();
  std::vector<double> total(orders.size(), 0.0);
  for (size_t g = 0; g < groups.size();) {
    double steps = 0.0;
    size_t h = g;
    for (; h < groups.size() && groups[h].q == groups[g].q && groups[h].sigma == groups[g].sigma;
         ++h)
      steps += static_cast<double>(groups[h].steps);
    for (size_t k = 0; k < orders.size(); ++k)
      total[k] += steps * rdp_subsampled_gaussian(groups[g].q, groups[g].sigma, orders[k]);
    g = h;
  }
  return rdp_to_epsilon(orders, total, delta);
}

double rdp_epsilon_floor(double delta) {
  const auto& orders = default_orders();
  const std::vector<double> zeros(orders.size(), 0.0);
  return rdp_to_epsilon(orders, zeros, delta).epsilon;
}

}  // namespace dpg::dp
