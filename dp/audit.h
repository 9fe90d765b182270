// The statistics of a one-run privacy audit (Steinke, Nasr and Jagielski 2023, "Privacy Auditing
// with One (1) Training Run"): m canaries, each included in the training data independently with
// probability 1/2; after one run the auditor guesses "in" for some, "out" for others and abstains
// on the rest. If the run is (epsilon, delta)-DP under add/remove adjacency, the number W of
// correct guesses out of r satisfies (the paper's Theorem 5.2 with its delta correction, Appendix
// D's Algorithm):
//
//   P[W >= v] <= P[Binomial(r, p_eps) >= v] + 2 m delta alpha,   p_eps = e^eps / (1 + e^eps),
//   alpha = max over i in 1..v of P[v - i <= Binomial(r, p_eps) < v] / i.
//
// A count v whose right-hand side is below 1 - confidence rejects (epsilon, delta)-DP; the largest
// such epsilon is the empirical lower bound. It rejects every smaller epsilon too (a mechanism
// that is (e', delta)-DP is (e, delta)-DP for e >= e'), so any epsilon found this way is valid
// whatever the shape of the p-value between. docs/PRIVACY.md, "Empirical audit".
//
// Pure: no I/O, no threads. Bad arguments throw dpg::Error(Code::invalid_argument) naming the
// argument.
#pragma once

#include <cstdint>
#include <span>

namespace dpg::dp {

// P-value of `correct` or more correct guesses out of `guesses` among `canaries` canaries under
// the hypothesis that the run is (epsilon, delta)-DP: the bound above, at most 1.
// 0 <= correct <= guesses <= canaries, canaries >= 1, epsilon >= 0, delta in [0, 1].
double audit_p_value(long long canaries, long long guesses, long long correct, double epsilon,
                     double delta);

// The largest epsilon (to 1e-9 absolute, rounded down) whose p-value is below 1 - confidence:
// the run is not (epsilon, delta)-DP, with that confidence. 0 when even epsilon 0 is not
// rejected (no guesses, or no better than chance). confidence in (0, 1), delta in [0, 1).
double audit_epsilon_lower_bound(long long canaries, long long guesses, long long correct,
                                 double delta, double confidence = 0.95);

struct AuditGuesses {
  long long guesses = 0;  // k+ + k-: every canary not abstained on
  long long correct = 0;  // "in" guesses of included canaries plus "out" guesses of excluded ones
};

// Guesses "in" for the k_plus highest scores and "out" for the k_minus lowest, abstains on the
// rest, and counts the correct guesses against `included`. Ties keep index order (the scores
// are compared, never the bits). k_plus + k_minus <= scores.size() == included.size(), and every
// score finite.
AuditGuesses audit_guess(std::span<const double> scores, std::span<const std::uint8_t> included,
                         long long k_plus, long long k_minus);

}  // namespace dpg::dp
