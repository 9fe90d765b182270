// Renyi DP of the Poisson-subsampled Gaussian mechanism (Mironov, Talwar, Zhang 2019) converted
// to (epsilon, delta) with Balle et al. 2020, computed the way Opacus 1.5
// (opacus/accountants/analysis/rdp.py) computes it: the RDP accountant of dp/accountant.h. See
// docs/PRIVACY.md.
//
// Pure: no I/O, no threads, no global mutable state. Bad arguments throw
// dpg::Error(Code::invalid_argument) naming the argument.
#pragma once

#include <span>
#include <vector>

#include "dp/pld.h"

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
  double epsilon;     // >= 0; +inf when no bound is finite
  double best_alpha;  // RDP: the order attaining the minimum; NaN when there is none, and always
                      // for the PLD accountant, which has no orders
};

// Balle et al. 2020 (Theorem 21), the conversion of Opacus, TF Privacy and dp_accounting:
//   eps(alpha) = rdp(alpha) - (log(delta) + log(alpha)) / (alpha - 1) + log((alpha - 1) / alpha)
// minimised over `orders`, ignoring NaN entries, clamped below at 0.
PrivacySpent rdp_to_epsilon(std::span<const double> orders, std::span<const double> rdp,
                            double delta);

// True when `best_alpha` is the smallest or the largest of `orders`: the bound could be tighter
// with a wider grid (Opacus warns in this case).
bool at_grid_edge(std::span<const double> orders, double best_alpha);

// Epsilon of a history of segments at `delta` with the default orders: RDP adds up over the
// segments, one evaluation per distinct (q, sigma). Epsilon 0 (best_alpha NaN) when nothing with
// q > 0 and steps > 0 is in it.
PrivacySpent rdp_epsilon(std::span<const PoissonGaussian> history, double delta);

// The smallest epsilon the default orders can certify at `delta` whatever the noise (RDP 0):
// 0.1029 at delta 1e-5. A calibration target at or below it is unreachable.
double rdp_epsilon_floor(double delta);

}  // namespace dpg::dp
