// Log-space arithmetic shared by the accountants (dp/accountant.cc, dp/pld.cc): a number x >= 0
// is held as log(x), 0 as -inf, so that probabilities far below the smallest double and
// moments far above the largest keep their digits.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace dpg::dp::logmath {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// log(exp(logx) + exp(logy)).
inline double log_add(double logx, double logy) {
  const double a = std::min(logx, logy);
  const double b = std::max(logx, logy);
  if (a == -kInf) return b;
  return std::log1p(std::exp(a - b)) + b;
}

// log(exp(logx) - exp(logy)); NaN when the difference would be negative (the caller decides
// what that means: in the RDP fractional series, that rounding has eaten the result).
inline double log_sub(double logx, double logy) {
  if (logx < logy) return kNaN;
  if (logy == -kInf) return logx;
  if (logx == logy) return -kInf;
  const double d = logy - logx;  // < 0
  // log(1 - e^d): expm1 near 0 keeps the digits that log1p(-e^d) would lose.
  return logx + (d > -std::numbers::ln2 ? std::log(-std::expm1(d)) : std::log1p(-std::exp(d)));
}

// log(erfc(x)), accurate where erfc(x) underflows: past x = 25 the asymptotic expansion
// erfc(x) = exp(-x^2) / (x sqrt(pi)) * (1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6) + 105/(16x^8) ...),
// whose logarithm's series is -1/(2x^2) + 5/(8x^4) - 37/(24x^6) + 353/(64x^8); the first omitted
// term is below 1e-13 at x = 25.
inline double log_erfc(double x) {
  if (x < 25.0) return std::log(std::erfc(x));
  const double r = 1.0 / (x * x);
  const double series = r * (-0.5 + r * (0.625 + r * (-37.0 / 24.0 + r * (353.0 / 64.0))));
  return -x * x - std::log(x) - 0.5 * std::log(std::numbers::pi) + series;
}

// The standard normal CDF Phi(z) and log(Phi(z)), the latter accurate far into the left tail.
inline double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::numbers::sqrt2); }
inline double log_normal_cdf(double z) {
  return -std::numbers::ln2 + log_erfc(-z / std::numbers::sqrt2);
}

}  // namespace dpg::dp::logmath
