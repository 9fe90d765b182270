// The discrete Gaussian on a fixed-point grid: `--secure-noise`'s noise (docs/PRIVACY.md, "The
// noise modes").
//
// Why. Gaussian noise computed in floating point and added to a float leaks through rounding: the
// set of floats reachable from a value v is not the set reachable from a neighbouring v', so the
// low-order bits of a released value can tell them apart (Mironov 2012 for textbook Laplace; the
// same reasoning holds for the Gaussian). Here nothing in floating point touches the noise: the
// clipped sum is rounded onto an integer grid, integer noise is added there, and what is released
// is a function of that integer alone. Two sums that round to one grid point give bit-identical
// releases under the same key.
//
// The noise. N_Z(0, s2), P(X = k) proportional to exp(-k^2 / (2 s2)) over the integers (Canonne,
// Kamath and Steinke 2020, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020), drawn
// exactly by their Algorithms 1 to 3 in integer arithmetic (128-bit where needed), with s2 an
// integer:
// - Bernoulli(exp(-g)) for a rational g = num / den: for g in [0, 1], the smallest K with
//   A_K = 0, A_k ~ Bernoulli(g / k), is odd with probability exp(-g); for g > 1, floor(g) draws of
//   Bernoulli(exp(-1)) then one of exp(-(g - floor g)), stopping at the first 0;
// - the discrete Laplace of scale t: U uniform in [0, t) kept with probability exp(-U / t), plus
//   t times a geometric V (Bernoulli(exp(-1)) until a 0), a fair sign, -0 rejected;
// - the discrete Gaussian: t = floor(sqrt(s2)) + 1, Y a discrete Laplace of scale t, kept with
//   probability exp(-(|Y| - s2 / t)^2 / (2 s2)) = exp(-(|Y| t - s2)^2 / (2 s2 t^2)).
// Every Bernoulli(a / b) compares a uniform integer in [0, b) (rejection on b's bit length) with a.
// Two cut-offs make the loops finite: a proposal whose acceptance probability is below
// exp(-2^22) (| |Y| t - s2 | >= 2^64) is rejected outright, and a geometric past 2^30 restarts the
// proposal; each changes the distribution by less than exp(-2^22) in total variation.
// The bits come from ChaCha20 under a dp::NoiseKey (dp/value_stream.h, tags 4, 5, 6), each draw
// taking only the bits it needs; value x owns 4 blocks (32 words: at the recipe's s2, 4 ran faster
// than 2 in `bench step --secure-noise`), then its sub-stream, so a range noised alone equals the
// same range of the whole.
//
// The grid. A peer's clipped sum x (each example's gradient of L2 norm <= C) goes onto the grid as
// round(x * scale / C). One example moves x by at most C in L2, and rounding moves each coordinate
// by less than 1 either way, so the grid value moves by at most l2 = scale + sqrt(d) in L2 (d
// values). Noise N_Z(0, s2) with s2 >= (sigma l2)^2 is then the discrete Gaussian mechanism at
// noise multiplier sigma. Its Renyi divergence at every order is at most the continuous Gaussian's
// at the same l2 / sqrt(s2) (Canonne et al.'s bound for one coordinate, alpha Delta^2 / (2 s2),
// summed over independent coordinates), and its privacy loss is a function of <X, Delta> whose
// moment generating function is the continuous one's times a factor within 4 exp(-2 pi^2 s2) of 1
// (Poisson summation), nothing at s2 >= 2^20. dpgossip therefore accounts it as the Gaussian
// mechanism of multiplier sigma under either accountant; for the Poisson-subsampled mechanism
// (PLD, or RDP's add direction) that rests on this closeness, not on a separate proof.
// The scale is the largest power of two up to 2^24 with sigma l2 <= 2^26, so that s2 <= 2^52
// keeps every product inside 128 bits; the noise is then sigma C times l2 / scale =
// 1 + sqrt(d) / scale (1 + 3.1e-5 for the recipe's 269,322 values at 2^24).
//
// What stays in floating point: the model's gradients, each example's clipping factor and the
// clipped sum, before the grid. A neighbouring batch moves that float sum by the example's clipped
// gradient plus the rounding of the sum (of the order of 2^-24 of each coordinate, depending on
// the BLAS's order of summation), and that rounding is not in l2. docs/PRIVACY.md says so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "dp/secure_noise.h"

namespace dpg::dp {

// The largest s2 add_discrete_gaussian accepts (2^52).
inline constexpr std::uint64_t kMaxDiscreteGaussianVariance = 1ULL << 52;

// out[i] += X_i, X_i ~ N_Z(0, sigma2) independent, drawn from ChaCha20(key) under `stream` at
// position first + i. sigma2 in [1, kMaxDiscreteGaussianVariance] (invalid_argument otherwise);
// a range ending past 2^30 values is refused (invalid_argument); dpg::Error(internal) if libcrypto
// fails. A value whose sum would leave the int64 range throws invalid_argument.
void add_discrete_gaussian(std::span<std::int64_t> out, std::uint64_t sigma2, const NoiseKey& key,
                           std::uint64_t stream, std::size_t first = 0);

// The grid and noise of `--secure-noise` for noise multiplier sigma (> 0, finite) over d values.
struct NoiseGrid {
  double scale = 0;         // grid steps per clip norm C (a power of two, at most 2^24)
  double l2 = 0;            // L2 sensitivity of the grid value: scale + sqrt(d)
  std::uint64_t sigma2 = 0; // the discrete Gaussian's s2: an integer >= (sigma l2)^2
};
// Throws invalid_argument naming noise_multiplier when no scale >= 1 keeps sigma l2 <= 2^26.
NoiseGrid plan_noise_grid(double sigma, std::size_t d);

}  // namespace dpg::dp
