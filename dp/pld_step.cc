#include "dp/pld_step.h"

#include <algorithm>
#include <cmath>

#include "dp/log_math.h"

namespace dpg::dp::pld_detail {
namespace {

using logmath::kInf;
using logmath::log_add;
using logmath::log_normal_cdf;
using logmath::log_sub;
using logmath::normal_cdf;

// z with Phi(z) = 0.5 e^-50 (about -10.0): the noise's tails beyond it hold e^-50 in all, as in
// dp_accounting's GaussianPrivacyLoss (log_mass_truncation_bound = -50). Found by bisection on
// log Phi, which is exact to the last digits there.
double truncation_quantile() {
  static const double z = [] {
    const double target = -std::log(2.0) - 50.0;
    double lo = -40.0, hi = 0.0;
    for (int i = 0; i < 200 && hi - lo > 1e-15; ++i) {
      const double mid = 0.5 * (lo + hi);
      (log_normal_cdf(mid) < target ? lo : hi) = mid;
    }
    return hi;
  }();
  return z;
}

// log(1 + (e^loss - 1) / q): the loss without subsampling whose subsampled loss is `loss`, for
// log(1 - q) < loss (Mironov et al.'s mixture inverted), without overflow for large losses.
// log_q is log(q).
double unsubsampled_loss(double loss, double log_q) {
  if (loss > 0) return log_add(log_sub(loss, 0.0) - log_q, 0.0);
  if (loss == 0) return 0.0;
  return log_sub(0.0, std::log(-std::expm1(loss)) - log_q);
}

}  // namespace

StepLoss::StepLoss(double q, double sigma, Direction direction)
    : q_(q), sigma_(sigma), log_q_(std::log(q)), log_1mq_(std::log1p(-q)), direction_(direction) {
  const double z = truncation_quantile() * sigma;
  if (direction == Direction::remove) {
    lower_x_ = z - 1.0;
    upper_x_ = -z;
  } else {
    lower_x_ = z;
    upper_x_ = -z + 1.0;
  }
}

double StepLoss::loss(double x) const {
  // Remove: log((1-q) + q exp(l0(x))) with l0(x) = (-1/2 - x) / sigma^2, the Gaussian
  // mechanism's loss; add: minus the remove loss at -x (the pair is the mirror image).
  const double y = direction_ == Direction::remove ? x : -x;
  const double l0 = (-0.5 - y) / (sigma_ * sigma_);
  const double l = q_ == 1.0 ? l0 : log_add(log_1mq_, log_q_ + l0);
  return direction_ == Direction::remove ? l : -l;
}

double StepLoss::inverse(double loss) const {
  const bool add = direction_ == Direction::add;
  const double l = add ? -loss : loss;  // the remove loss to invert
  double x;
  if (l == kInf) {
    x = -kInf;
  } else if (q_ < 1.0 && l <= log_1mq_) {
    x = kInf;  // every x has a remove loss above log(1 - q)
  } else {
    const double l0 = q_ == 1.0 ? l : unsubsampled_loss(l, log_q_);
    x = -0.5 - l0 * sigma_ * sigma_;
  }
  return add ? -x : x;
}

double StepLoss::upper_cdf(double x) const {
  if (direction_ == Direction::add) return normal_cdf(x / sigma_);
  if (q_ == 1.0) return normal_cdf((x + 1.0) / sigma_);
  return (1.0 - q_) * normal_cdf(x / sigma_) + q_ * normal_cdf((x + 1.0) / sigma_);
}

double StepLoss::lower_log_cdf(double x) const {
  if (direction_ == Direction::remove) return log_normal_cdf(x / sigma_);
  if (q_ == 1.0) return log_normal_cdf((x - 1.0) / sigma_);
  return log_add(log_1mq_ + log_normal_cdf(x / sigma_),
                 log_q_ + log_normal_cdf((x - 1.0) / sigma_));
}

double StepLoss::delta(double eps) const {
  if (q_ < 1.0) {
    // Remove: every loss is above log(1 - q), so below it delta = 1 - e^eps. Add: every loss is
    // below -log(1 - q), so from there on delta = 0.
    if (direction_ == Direction::remove && eps <= log_1mq_) return -std::expm1(eps);
    if (direction_ == Direction::add && eps >= -log_1mq_) return 0.0;
  }
  // The loss is non-increasing in x, so L > eps exactly left of x* = inverse(eps).
  const double x = inverse(eps);
  const double d = upper_cdf(x) - std::exp(eps + lower_log_cdf(x));
  return std::clamp(d, 0.0, 1.0);
}

double StepLoss::grid_points(double interval) const {
  return std::ceil(loss(lower_x_) / interval) - std::floor(loss(upper_x_) / interval) + 1.0;
}

GridPmf StepLoss::pessimistic(double interval) const {
  const long long hi = static_cast<long long>(std::ceil(loss(lower_x_) / interval));
  const long long lo = static_cast<long long>(std::floor(loss(upper_x_) / interval));
  const std::size_t n = static_cast<std::size_t>(hi - lo + 1);
  std::vector<double> deltas(n);
  for (std::size_t i = 0; i < n; ++i) {
    deltas[i] = delta(static_cast<double>(lo + static_cast<long long>(i)) * interval);
    if (i > 0) deltas[i] = std::min(deltas[i], deltas[i - 1]);  // delta is non-increasing
  }
  GridPmf pmf;
  pmf.offset = lo;
  pmf.infinity = deltas.back();
  if (n == 1) {
    pmf.probs = {1.0 - deltas[0]};
    return pmf;
  }
  // Connect the dots with a fixed gap h (Doroshenko et al. 2022, Algorithm 1): with
  // D_i = delta_{i+1} - delta_i,
  //   p_0 = 1 - delta_0 + D_0 / (e^h - 1)
  //   p_i = (D_i - e^h D_{i-1}) / (e^h - 1)
  //   p_last = D_{last-1} / (e^-h - 1)
  // so that the PMF's delta equals delta_i at every grid point; the masses sum to 1 - delta_last.
  const double em1 = std::expm1(interval);
  const double e = std::exp(interval);
  pmf.probs.resize(n);
  if (std::isinf(em1)) {
    // h > 709.78 (one step's loss in the tens of thousands: sigma near 1e-5 or below): e^h
    // overflows and the lines above would give inf / inf. Their limits, exact to the last bit
    // once e^h > 2^53: D_i / (e^h - 1) is 0 and e^h / (e^h - 1) is 1, so p_0 = 1 - delta_0 and
    // p_i = delta_{i-1} - delta_i: each point takes the mass between its neighbours' deltas.
    pmf.probs[0] = 1.0 - deltas[0];
    for (std::size_t i = 1; i < n; ++i) pmf.probs[i] = deltas[i - 1] - deltas[i];
  } else {
    pmf.probs[0] = 1.0 - deltas[0] + (deltas[1] - deltas[0]) / em1;
    for (std::size_t i = 1; i + 1 < n; ++i)
      pmf.probs[i] = ((deltas[i + 1] - deltas[i]) - e * (deltas[i] - deltas[i - 1])) / em1;
    pmf.probs[n - 1] = (deltas[n - 1] - deltas[n - 2]) / std::expm1(-interval);
  }
  for (double& p : pmf.probs) p = std::max(p, 0.0);  // rounding can leave -1e-17
  return pmf;
}

GridPmf StepLoss::optimistic(double interval) const {
  const double top = loss(lower_x_);
  const double bottom = loss(upper_x_);
  const long long hi = static_cast<long long>(std::floor(top / interval));
  const long long lo = static_cast<long long>(std::floor(bottom / interval));
  GridPmf pmf;
  pmf.offset = lo;
  pmf.probs.assign(static_cast<std::size_t>(hi - lo + 1), 0.0);
  // The tail left of lower_x has losses above `top`: rounded down to it (not to +inf). The tail
  // right of upper_x has losses below `bottom`: rounded down to -inf, so left out.
  double cdf = upper_cdf(lower_x_);
  pmf.probs.back() += cdf;
  double x = lower_x_;
  // Each bucket [x, x_next] holds the losses in [k h, (k+1) h), rounded down to k h.
  for (long long k = hi; x < upper_x_ && k >= lo; --k) {
    const double kh = static_cast<double>(k) * interval;
    const double x_next = kh <= bottom ? upper_x_ : std::min(inverse(kh), upper_x_);
    const double next_cdf = upper_cdf(x_next);
    pmf.probs[static_cast<std::size_t>(k - lo)] += std::max(next_cdf - cdf, 0.0);
    cdf = next_cdf;
    x = x_next;
  }
  return pmf;
}

// All the orders at once, in one pass, instead of one pass per order: each order's chain of
// operations is the one its own pass would run, so the sums are the same, but the chains run side
// by side (the compiler vectorises across the orders) where one chain alone waits on each
// multiply (74 passes took most of a calibration's time).
// A weight stops (becomes 0) once it is below a quarter of its sum's last bit: from then on every
// term p_j w (p_j <= 1) rounds away, so the sum is the full walk's, and the weight does not go on
// into subnormal values, on which every multiply takes a slow microcode path.
DecaySums decayed_sums(const std::vector<double>& p, const DecaySums& decay, bool forward) {
  constexpr std::size_t kBlock = 64;
  DecaySums weight, sum{};
  weight.fill(1.0);
  const std::size_t n = p.size();
  for (std::size_t begin = 0; begin < n; begin += kBlock) {
    const std::size_t stop = std::min(n, begin + kBlock);
    for (std::size_t i = begin; i < stop; ++i) {
      const double pj = p[forward ? i : n - 1 - i];
      for (std::size_t k = 0; k < kDecays; ++k) {
        sum[k] += pj * weight[k];
        weight[k] *= decay[k];
      }
    }
    // sum * 2^-55 < ulp(sum) / 4 for a normal sum (and exact above 2^-967, hence the floor).
    for (std::size_t k = 0; k < kDecays; ++k)
      if (sum[k] > 0x1p-900 && weight[k] < sum[k] * 0x1p-55) weight[k] = 0.0;
  }
  return sum;
}

}  // namespace dpg::dp::pld_detail
