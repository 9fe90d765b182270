#include "dp/audit.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "dp/checks.h"

namespace dpg::dp {
namespace {

using checks::bad_argument;
using checks::str;

void check_counts(long long canaries, long long guesses, long long correct) {
  if (canaries < 1) bad_argument("canaries must be >= 1, got " + std::to_string(canaries));
  if (guesses < 0 || guesses > canaries) {
    bad_argument("guesses must be in [0, canaries = " + std::to_string(canaries) + "], got " +
                 std::to_string(guesses));
  }
  if (correct < 0 || correct > guesses) {
    bad_argument("correct must be in [0, guesses = " + std::to_string(guesses) + "], got " +
                 std::to_string(correct));
  }
}

void check_audit_delta(double delta) {
  if (!(delta >= 0.0 && delta <= 1.0)) bad_argument("delta must be in [0, 1], got " + str(delta));
}

// The binomial of r trials at the success rate of an epsilon-DP randomised response, with its
// log binomial coefficients computed once (the bisection evaluates many epsilons).
class RandomisedResponse {
 public:
  explicit RandomisedResponse(long long r) : log_choose_(static_cast<std::size_t>(r) + 1) {
    const double lr = std::lgamma(static_cast<double>(r) + 1.0);
    for (long long k = 0; k <= r; ++k) {
      log_choose_[static_cast<std::size_t>(k)] =
          lr - std::lgamma(static_cast<double>(k) + 1.0) -
          std::lgamma(static_cast<double>(r - k) + 1.0);
    }
  }

  // The bound of dp/audit.h on P[W >= v] for v correct guesses among m canaries.
  double p_value(long long m, long long v, double epsilon, double delta) const {
    if (v == 0) return 1.0;
    const long long r = static_cast<long long>(log_choose_.size()) - 1;
    // log p and log (1 - p) of p = 1 / (1 + e^-eps), without cancellation for large eps.
    const double log1p_e = std::log1p(std::exp(-epsilon));
    const double log_p = -log1p_e, log_q = -epsilon - log1p_e;
    auto log_pmf = [&](long long k) {
      return log_choose_[static_cast<std::size_t>(k)] + static_cast<double>(k) * log_p +
             static_cast<double>(r - k) * log_q;
    };
    // beta = P[B >= v], summed in log space around its largest term.
    double top = -INFINITY;
    for (long long k = v; k <= r; ++k) top = std::max(top, log_pmf(k));
    double sum = 0.0;
    for (long long k = v; k <= r; ++k) sum += std::exp(log_pmf(k) - top);
    const double beta = std::exp(top) * sum;
    if (delta == 0.0) return std::min(beta, 1.0);
    // alpha = max over i of P[v - i <= B < v] / i.
    double alpha = 0.0, below = 0.0;
    for (long long i = 1; i <= v; ++i) {
      below += std::exp(log_pmf(v - i));
      alpha = std::max(alpha, below / static_cast<double>(i));
    }
    return std::min(beta + alpha * delta * 2.0 * static_cast<double>(m), 1.0);
  }

 private:
  std::vector<double> log_choose_;
};

}  // namespace

double audit_p_value(long long canaries, long long guesses, long long correct, double epsilon,
                     double delta) {
  check_counts(canaries, guesses, correct);
  if (!(epsilon >= 0.0) || std::isnan(epsilon)) {
    bad_argument("epsilon must be >= 0, got " + str(epsilon));
  }
  check_audit_delta(delta);
  if (std::isinf(epsilon)) return 1.0;  // every count is possible without privacy
  return RandomisedResponse(guesses).p_value(canaries, correct, epsilon, delta);
}

double audit_epsilon_lower_bound(long long canaries, long long guesses, long long correct,
                                 double delta, double confidence) {
  check_counts(canaries, guesses, correct);
  if (!(delta >= 0.0 && delta < 1.0)) bad_argument("delta must be in [0, 1), got " + str(delta));
  if (!(confidence > 0.0 && confidence < 1.0)) {
    bad_argument("confidence must be in (0, 1), got " + str(confidence));
  }
  const double target = 1.0 - confidence;
  const RandomisedResponse rr(guesses);
  auto rejected = [&](double eps) { return rr.p_value(canaries, correct, eps, delta) < target; };
  if (!rejected(0.0)) return 0.0;
  // Bracket: lo rejected, hi not. P[B >= v] -> 1 as epsilon grows (v <= r), so hi exists.
  double lo = 0.0, hi = 1.0;
  while (rejected(hi)) {
    lo = hi;
    hi += 1.0;
    if (hi > 1e4) fail(Code::internal, "audit: no epsilon up to 1e4 explains the guesses");
  }
  while (hi - lo > 1e-9) {
    const double mid = 0.5 * (lo + hi);
    (rejected(mid) ? lo : hi) = mid;
  }
  return lo;
}

AuditGuesses audit_guess(std::span<const double> scores, std::span<const std::uint8_t> included,
                         long long k_plus, long long k_minus) {
  const auto m = static_cast<long long>(scores.size());
  if (included.size() != scores.size()) {
    bad_argument("included has " + std::to_string(included.size()) + " entries for " +
                 std::to_string(m) + " scores");
  }
  if (k_plus < 0) bad_argument("k_plus must be >= 0, got " + std::to_string(k_plus));
  if (k_minus < 0) bad_argument("k_minus must be >= 0, got " + std::to_string(k_minus));
  if (k_plus + k_minus > m) {
    bad_argument("k_plus + k_minus must be at most the " + std::to_string(m) +
                 " canaries, got " + std::to_string(k_plus) + " + " + std::to_string(k_minus));
  }
  for (long long i = 0; i < m; ++i) {
    if (!std::isfinite(scores[static_cast<std::size_t>(i)])) {
      bad_argument("scores[" + std::to_string(i) + "] is not finite: " +
                   str(scores[static_cast<std::size_t>(i)]));
    }
  }
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
  AuditGuesses g;
  g.guesses = k_plus + k_minus;
  for (long long i = 0; i < k_plus; ++i) g.correct += included[order[static_cast<std::size_t>(i)]] ? 1 : 0;
  for (long long i = m - k_minus; i < m; ++i) {
    g.correct += included[order[static_cast<std::size_t>(i)]] ? 0 : 1;
  }
  return g;
}

}  // namespace dpg::dp
