// One step of the Poisson-subsampled Gaussian as a privacy loss distribution on a grid: the
// pieces of dp/pld.cc that know the mechanism (the loss, its inverse, the hockey-stick divergence
// and the two discretisations), and the PMF's moments that bound the composition's window.
// Internal to dp/; the reasoning is in dp/pld.h.
#pragma once

#include <array>
#include <cstddef>
#include <vector>

namespace dpg::dp::pld_detail {

// Which neighbour the pair (P, Q) describes (dp/pld.h).
enum class Direction { remove, add };

// A PMF on the grid: probability probs[i] at loss (offset + i) * interval, plus `infinity` at +inf.
struct GridPmf {
  long long offset = 0;
  std::vector<double> probs;
  double infinity = 0;
};

// The privacy loss of one step with sensitivity 1, noise sd sigma, sample rate q in (0, 1].
class StepLoss {
 public:
  StepLoss(double q, double sigma, Direction direction);

  // L(x) = log(P(x) / Q(x)), non-increasing in x.
  double loss(double x) const;
  // The largest x with L(x) >= loss (+inf or -inf past the range of L).
  double inverse(double loss) const;
  // The hockey-stick divergence delta(eps) = P(L > eps) - e^eps Q(L > eps), in [0, 1].
  double delta(double eps) const;
  // Loss at the truncation points: the noise's 0.5 e^-50 quantiles, shifted as dp_accounting
  // shifts them so that, for q = 1, remove and add give the same grid.
  double loss_at_lower_x() const { return loss(lower_x_); }
  double loss_at_upper_x() const { return loss(upper_x_); }

  // Grid points the PMFs span at `interval` (as a double: it may exceed any integer type).
  double grid_points(double interval) const;
  // The connect-the-dots PMF (pessimistic) and the rounded-down buckets (optimistic).
  GridPmf pessimistic(double interval) const;
  GridPmf optimistic(double interval) const;

 private:
  double upper_cdf(double x) const;      // P(X <= x)
  double lower_log_cdf(double x) const;  // log Q(X <= x)

  double q_, sigma_;
  double log_q_, log_1mq_;  // log(q) and log(1 - q), asked for at every grid point
  Direction direction_;
  double lower_x_, upper_x_;
};

// The Chernoff window's moments (dp/pld.cc): one per order of one sign.
constexpr std::size_t kDecays = 37;
using DecaySums = std::array<double, kDecays>;

// sums[k] = sum_j p[j] decay[k]^j, j counted from the PMF's first point (forward) or from its
// last, for decays in (0, 1] and p[j] in [0, 1]. The result is, bit for bit, what a walk per
// order gives (sum += p_j w, then w *= decay, with the product fused into the addition as the
// compiler contracts it).
DecaySums decayed_sums(const std::vector<double>& p, const DecaySums& decay, bool forward);

}  // namespace dpg::dp::pld_detail
