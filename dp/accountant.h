// Privacy accounting for DP-SGD: Renyi DP of the Poisson-subsampled Gaussian mechanism
// (Mironov, Talwar, Zhang 2019) converted to (epsilon, delta) with Balle et al. 2020, computed
// the way Opacus 1.5 (opacus/accountants/analysis/rdp.py) computes it. See docs/PRIVACY.md.
//
// Pure: no I/O, no threads, no global mutable state. Bad arguments throw
// dpg::Error(Code::invalid_argument) naming the argument.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

namespace dpg::dp {

// Opacus's default RDP orders: 1.1, 1.2, ..., 10.9 (99 orders) then 12, 13, ..., 63 (52 orders).
const std::vector<double>& default_orders();

// RDP at order `alpha` (> 1) of one step of the Gaussian mechanism with noise multiplier `sigma`
// (> 0) applied to a Poisson sample with rate `q` (in [0, 1]). Add/remove adjacency.
// Returns NaN in the rare case where the fractional-order series loses all precision (an order
// that rdp_to_epsilon then ignores, as Opacus does).
double rdp_subsampled_gaussian(double q, double sigma, double alpha);

// The same at every order of `orders`, times `steps` (>= 0).
std::vector<double> rdp_subsampled_gaussian(double q, double sigma, long long steps,
                                            std::span<const double> orders);

struct PrivacySpent {
  double epsilon;     // >= 0; +inf when no order gives a finite bound
  double best_alpha;  // the order attaining the minimum; NaN when there is none
};

// Balle et al. 2020 (Theorem 21), the conversion of Opacus, TF Privacy and dp_accounting:
//   eps(alpha) = rdp(alpha) - (log(delta) + log(alpha)) / (alpha - 1) + log((alpha - 1) / alpha)
// minimised over `orders`, ignoring NaN entries, clamped below at 0.
PrivacySpent rdp_to_epsilon(std::span<const double> orders, std::span<const double> rdp,
                            double delta);

// True when `best_alpha` is the smallest or the largest of `orders`: the bound could be tighter
// with a wider grid (Opacus warns in this case).
bool at_grid_edge(std::span<const double> orders, double best_alpha);

// Epsilon after `steps` (>= 0) steps with the default orders. 0 steps -> epsilon 0.
PrivacySpent epsilon_for(double q, double sigma, long long steps, double delta);

// Smallest noise multiplier whose epsilon after `steps` (>= 1) is <= target_epsilon, found by
// bisection until the bracket is narrower than 1e-4 of its upper end (so within 1e-3 relative of
// the exact root with room to spare); returns the upper end, whose epsilon is <= target. Throws invalid_argument when the target cannot be met by any
// noise multiplier (below what the order grid can certify) or is met by any multiplier >= 1e-3.
double calibrate_noise_multiplier(double q, long long steps, double delta, double target_epsilon);

// ceil(epochs / q) steps; a quotient within 1e-9 (relative) of an integer counts as that integer,
// so that 90 epochs at q = 0.04 is 2250 steps whatever the binary rounding of 0.04.
long long steps_for_epochs(double epochs, double q);

// Running privacy cost of a training run: stepped once per step by the training loop, saved to and
// restored from a checkpoint as JSON.
class RdpAccountant {
 public:
  struct Segment {
    double q;
    double sigma;
    long long steps;
    bool operator==(const Segment&) const = default;
  };

  // Records `steps` (>= 0) steps with sample rate q and noise multiplier sigma; merges with the
  // last segment when (q, sigma) are equal.
  void step(double q, double sigma, long long steps = 1);

  // Epsilon spent so far at `delta`, one RDP evaluation per distinct (q, sigma). Epsilon 0 (and
  // best_alpha NaN) while nothing with q > 0 has been recorded.
  PrivacySpent spent(double delta) const;

  long long steps() const { return steps_; }
  std::span<const Segment> history() const { return history_; }

  // {"mechanism":"poisson_gaussian_rdp","history":[{"q":..,"sigma":..,"steps":..},...]}
  nlohmann::json to_json() const;
  // Validates everything; errors name `where` and the JSON path ("accountant:/history/2/sigma").
  static RdpAccountant from_json(const nlohmann::json& j, const std::string& where = "accountant:");

  bool operator==(const RdpAccountant&) const = default;

 private:
  std::vector<Segment> history_;
  long long steps_ = 0;
};

}  // namespace dpg::dp
