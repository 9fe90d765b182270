// The privacy accountants of DP-SGD with Poisson sampling, and the running account a training
// run keeps. See docs/PRIVACY.md.
//
// Two ways to turn a history of Poisson-subsampled Gaussian steps into (epsilon, delta), both
// upper bounds on the true epsilon under add/remove adjacency:
// - pld (the default): privacy loss distributions (dp/pld.h), the pessimistic estimate, within
//   about 1e-3 of the true epsilon: 6.769 for Opacus's test case (q 0.04, sigma 1.5, 2250 steps,
//   delta 1e-5), where Opacus's PRV accountant reports 6.777.
// - rdp: Renyi DP (dp/rdp.h), exactly as Opacus's RDPAccountant: 7.329 for the same case. Looser,
//   so it needs more noise for the same epsilon (sigma 2.63 against 2.46 at the default recipe).
// The history (q, sigma, steps) is the whole state of an account, so a run recorded under one
// can be re-evaluated under the other. Secure aggregation's account is of another mechanism, the
// Poisson-subsampled Skellam (dp/skellam.h): its history is (q, mu, l1, l2, steps) and it is
// evaluated by Renyi DP whatever the kind asked for (PLD is for the Gaussian).
//
// Pure: no I/O, no threads, no global mutable state (the PLD's plan and scratch caches aside,
// dp/pld.h). Bad arguments throw dpg::Error(Code::invalid_argument) naming the argument.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dp/pld.h"
#include "dp/rdp.h"
#include "dp/skellam.h"

namespace dpg::dp {

enum class AccountantKind { pld, rdp };

std::string to_string(AccountantKind kind);  // "pld" or "rdp"
// "pld" or "rdp"; anything else throws invalid_argument `expected pld or rdp, got "x"`.
AccountantKind parse_accountant_kind(std::string_view text);

// Epsilon after `steps` (>= 0) steps of one (q, sigma). 0 steps (or q = 0) -> epsilon 0.
PrivacySpent epsilon_for(double q, double sigma, long long steps, double delta,
                         AccountantKind kind);

// Smallest noise multiplier whose epsilon after `steps` (>= 1) is <= target_epsilon, found by
// bisection until the bracket is narrower than 1e-4 of its upper end (so within 1e-3 relative of
// the exact root with room to spare); returns the upper end, whose epsilon is <= target by the
// chosen accountant. Throws invalid_argument when the target cannot be met by any noise
// multiplier up to 1e6 (for RDP also: below what the order grid can certify) or is met by any
// multiplier >= 1e-3.
double calibrate_noise_multiplier(double q, long long steps, double delta, double target_epsilon,
                                  AccountantKind kind);

// ceil(epochs / q) steps; a quotient within 1e-9 (relative) of an integer counts as that integer,
// so that 90 epochs at q = 0.04 is 2250 steps whatever the binary rounding of 0.04.
long long steps_for_epochs(double epochs, double q);

// Running privacy cost of a training run: stepped once per step by the training loop, saved to and
// restored from a checkpoint as JSON. Evaluated by its own kind, or by either on request.
class Accountant {
 public:
  using Segment = PoissonGaussian;

  explicit Accountant(AccountantKind kind = AccountantKind::pld) : kind_(kind) {}
  // An account of Poisson-subsampled Skellam steps (secure aggregation), of kind rdp.
  static Accountant skellam();

  // Records `steps` (>= 0) steps with sample rate q and noise multiplier sigma; merges with the
  // last segment when (q, sigma) are equal. Throws invalid_argument on a Skellam account.
  void step(double q, double sigma, long long steps = 1);
  // The same for a Skellam account: Sk(mu) noise on a grid value of sensitivities l1 and l2;
  // throws invalid_argument on a Gaussian account.
  void step_skellam(double q, double mu, double l1, double l2, long long steps = 1);

  // Epsilon spent so far at `delta` by this account's kind, or by `kind`. Epsilon 0 (and
  // best_alpha NaN) while nothing with q > 0 has been recorded.
  PrivacySpent spent(double delta) const { return spent(delta, kind_); }
  PrivacySpent spent(double delta, AccountantKind kind) const;

  AccountantKind kind() const { return kind_; }
  long long steps() const { return steps_; }
  bool is_skellam() const { return skellam_; }
  std::span<const Segment> history() const { return history_; }
  std::span<const PoissonSkellam> skellam_history() const { return skellam_history_; }

  // {"mechanism":"poisson_gaussian","accountant":"pld","history":[{"q":..,"sigma":..,"steps":..}]}
  // or {"mechanism":"poisson_skellam","accountant":"rdp",
  //     "history":[{"q":..,"mu":..,"l1":..,"l2":..,"steps":..}]}
  nlohmann::json to_json() const;
  // Validates everything; errors name `where` and the JSON path ("accountant:/history/2/sigma").
  // Also reads what earlier builds wrote, {"mechanism":"poisson_gaussian_rdp","history":[...]},
  // as an RDP account.
  static Accountant from_json(const nlohmann::json& j, const std::string& where = "accountant:");

  bool operator==(const Accountant&) const = default;

 private:
  // Adds `steps` to the total; throws if it would overflow.
  void count(long long steps);

  AccountantKind kind_;
  bool skellam_ = false;
  std::vector<Segment> history_;
  std::vector<PoissonSkellam> skellam_history_;
  long long steps_ = 0;
};

}  // namespace dpg::dp
