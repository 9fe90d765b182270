// Privacy accounting for DP-SGD by privacy loss distributions (PLD): the (epsilon, delta) of a
// composition of Poisson-subsampled Gaussian mechanisms, computed numerically to within a
// discretisation error that is itself bounded, as Google's dp_accounting (`pld/`) computes it.
// Tighter than RDP (dp/accountant.h): at the default recipe (q 0.0683, 586 steps, delta 1e-5)
// epsilon 3 needs sigma 2.46 rather than 2.63. See docs/PRIVACY.md.
//
// The mechanism. One step samples each example with probability q and adds N(0, sigma^2) to the
// clipped sum (sensitivity 1). Under add/remove adjacency the worst case of one step is a pair
// of distributions on the real line (Mironov et al. 2019; Zhu, Dong, Wang 2022):
//   remove (D' = D minus x):  P = (1-q) N(0, s^2) + q N(-1, s^2),  Q = N(0, s^2)
//   add    (D' = D plus x):   P = N(0, s^2),  Q = (1-q) N(0, s^2) + q N(1, s^2)
// The privacy loss L(x) = log(P(x) / Q(x)) with x ~ P; its distribution is the PLD, and
//   delta(eps) = E_P[(1 - exp(eps - L))_+] + P(L = inf)   (the hockey-stick divergence).
// T steps compose: the T-step PLD is the T-fold convolution of the one-step PLD, separately in
// each direction, because the neighbouring relation is fixed for the whole run. The run is
// (eps, delta)-DP when both directions' delta(eps) <= delta, so epsilon is the larger of the two
// directions' epsilons (dp_accounting's PrivacyLossDistribution does the same). The two differ
// for q < 1 (remove is usually the worse); for q = 1 they coincide.
//
// Discretisation (Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022, "Connect the dots").
// Losses are put on the grid k * h (h = `interval`).
// - Pessimistic: the one-step PLD is the "connect-the-dots" distribution on the grid points
//   between the losses at the noise's 0.5 e^-50 quantiles: its delta(eps) equals the true one at
//   every grid point and lies above it in between (delta is convex in e^eps), with the true delta
//   of the largest grid loss put on +inf. It dominates the true PLD, so every delta and epsilon
//   computed from it, and from its compositions, is an upper bound. Every reported epsilon is
//   this one.
// - Optimistic: "privacy buckets" rounding down: the probability of each loss interval
//   [k h, (k+1) h) goes to k h, the noise's lower 0.5 e^-50 tail to the loss at its edge, the
//   upper tail to -inf. It is dominated by the true PLD, so its epsilon is a lower estimate.
// The true epsilon lies between the two. The pessimistic one exceeds it by the connect-the-dots
// interpolation error, second order in h: measured against exact references (the Gaussian
// mechanism for q = 1; one subsampled step by quadrature) below 1e-6 for one step and 1e-3 after
// 20,000 steps, and 5e-6 above a 5x finer grid for (q 0.05, sigma 2, 1000 steps) at h = 1e-4;
// it reproduces dp_accounting's published figures to their last digit. The optimistic one rounds
// each of T losses down by less than h, so it is above the true epsilon minus T h, and sits T h / 2
// below the pessimistic one on average: measured, pessimistic - optimistic = T h / 2 + at most
// 4e-4 over the tests' grid (q 0.001-0.2, sigma 0.7-5, 1-4000 steps), 0.05 at 1000 steps.
//
// Composition: the one-step PMF of each distinct (q, sigma) is transformed once (FFTW, real to
// complex), raised to its number of steps pointwise and multiplied with the others, and
// transformed back: one forward transform per distinct (q, sigma) and one inverse in all, as
// dp_accounting's self_compose does. The transform length N covers the window [L, U] of summed
// grid indices outside which a Chernoff bound (the moment generating function of each PMF at a
// grid of orders) leaves at most `tail_mass` / 2 on each side; that mass folds into the window
// (the transform is circular) and is added to the pessimistic infinity mass (an upper bound on
// any error it causes) and to the optimistic side's delta target (so the optimistic epsilon
// stays below the true one).
//
// Bounds on memory and time: one-step PMFs and the window are held to `max_points` grid points.
// When a case needs more (a very small sigma, or so many steps that epsilon is in the hundreds)
// the interval doubles until it fits: the result stays a valid bound, only coarser, and the
// interval actually used is returned. The FFT's own rounding is not accounted, as in
// dp_accounting and Opacus's PRV accountant, but it is kept small where it matters: the forward
// transform's rounding of a bin is raised to the number of steps with it (a relative error of
// about steps * u), so below kPldLongDoubleBelow that transform and the powers are in long
// double (u = 5e-20 on x86-64, against double's 1.1e-16); the inverse, which amplifies nothing,
// is in double. All in double, the amplified rounding put epsilon under the exact one from delta
// 1e-8 down. The number of steps is capped at 1e9.
//
// Pure in what it returns: no I/O, and every result depends on the arguments only. It keeps
// state that only saves work: FFTW's plans, one per transform length, made under a mutex (FFTW's
// planner is not thread-safe; executing plans is), and per thread the transform buffers (two
// arrays of the largest window for one distinct mechanism, three for several) and the last four
// one-step PMFs (at most 2^20 points in all), until pld_release_memory(). Bad arguments throw
// dpg::Error(Code::invalid_argument) naming the argument.
#pragma once

#include <cstddef>
#include <span>

namespace dpg::dp {

// `steps` steps of the Poisson-subsampled Gaussian mechanism: sample rate q in [0, 1] (q = 0
// releases nothing about anyone), noise multiplier sigma > 0.
struct PoissonGaussian {
  double q;
  double sigma;
  long long steps;
  bool operator==(const PoissonGaussian&) const = default;
};

// Default grid interval h, also dp_accounting's. Measured (docs/PRIVACY.md): at 1e-4 the
// pessimistic epsilon is within 1e-5 of the converged value for the published cases, and one
// evaluation of 586 or 2250 steps takes milliseconds once a process has made one, tens of
// milliseconds the first time (FFTW's planning, first-touched buffers; docs/BENCHMARKS.md).
inline constexpr double kPldDefaultInterval = 1e-4;
// The most grid points held at once (one-step PMF or composed window): 2^21, so about 40 MiB
// with the transforms' buffers for one distinct mechanism (56 MiB for several), and 64 MiB more
// where a long double transform was used.
inline constexpr std::size_t kPldMaxPoints = std::size_t{1} << 21;
// The most steps the FFT's pointwise powers keep precise (see above).
inline constexpr long long kPldMaxSteps = 1'000'000'000;

// The smallest delta the PLD accountant answers for. Against the exact epsilon of the Gaussian
// mechanism (q = 1, 100 to 1e6 steps, epsilon 7 to 50), its pessimistic epsilon held as an upper
// bound at every delta down to 1e-14, within 1e-3 of the exact one down to 1e-12 up to 1e5
// steps (docs/PRIVACY.md). With the forward transforms in double it fell below the exact one
// from 1e-8 down, by up to 0.055 at 1e-12: the reason they are in long double there (below
// kPldLongDoubleBelow). Below
// 1e-12 the tail mass left out (1e-15) weighs on delta, and the RDP accountant, a valid bound
// at any delta, is the one to use: pld_epsilon refuses it.
inline constexpr double kPldMinDelta = 1e-12;

// Below this delta the forward transforms and their powers are in long double (pld.cc), above it
// in double, which is 30 to 50 % faster. The double transform's rounding, raised to the number of
// steps, moved epsilon (against long double, the exact grid of docs/PRIVACY.md) by at most 2.6e-6
// at delta 1e-5 and 2.2e-5 at 1e-6 (1e6 steps; 1e-8 at 1000 steps), far inside the pessimistic
// estimate's margin over the exact epsilon there; by 1e-8 it put epsilon under the exact one.
inline constexpr double kPldLongDoubleBelow = 1e-6;

enum class PldEstimate {
  pessimistic,  // an upper bound on the true epsilon (delta): what is reported
  optimistic,   // a lower estimate: shows how tight the pessimistic one is
};

struct PldOptions {
  double interval = kPldDefaultInterval;  // the grid h; smaller is tighter and slower (~1/h)
  double tail_mass = 1e-15;               // mass left outside the composed window (see above)
  std::size_t max_points = kPldMaxPoints;  // beyond this the interval doubles (>= 16)
};

struct PldResult {
  double value;     // epsilon (pld_epsilon) or delta (pld_delta); epsilon +inf when no finite
                    // epsilon reaches the delta
  double interval;  // the grid interval used: options.interval, or a multiple where capped
};

// Smallest epsilon >= 0 such that the composition of `history` is (epsilon, delta)-DP by the
// `estimate` PLD; 0 for an empty history (or one with q = 0 only). delta in [kPldMinDelta, 1).
PldResult pld_epsilon(std::span<const PoissonGaussian> history, double delta, PldEstimate estimate,
                      const PldOptions& options = {});

// The delta of the composition at `epsilon` (finite, any sign) by the `estimate` PLD. A value
// below kPldMinDelta is below what the accountant was checked at.
PldResult pld_delta(std::span<const PoissonGaussian> history, double epsilon, PldEstimate estimate,
                    const PldOptions& options = {});

// Hands back what is kept between evaluations only to save work: the calling thread's
// transforms' buffers (up to two arrays of the largest window it composed) and last one-step
// PMFs, and FFTW's plans (each destroyed once no thread is transforming with it). For a
// process done accounting for a while: the next evaluation makes them again (a plan costs
// about ten transforms).
void pld_release_memory();

}  // namespace dpg::dp
