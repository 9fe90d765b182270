// The discrete Gaussian on a fixed-point grid: `--secure-noise`'s noise (docs/PRIVACY.md, "The
// noise modes").
//
// Why. Gaussian noise computed in floating point and added to a float leaks through rounding: the
// set of floats reachable from a value v is not the set reachable from a neighbouring v', so the
// low-order bits of a released value can tell them apart (Mironov 2012 for textbook Laplace; the
// same reasoning holds for the Gaussian). Here the clipped examples are summed on an integer grid,
// integer noise is added there, and what is released is a function of that integer alone.
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
// taking only the bits it needs; value x owns 4 blocks (32 words, room to spare: a draw that runs
// past them sets up a sub-stream, which costs far more than unused keystream), so a range noised
// alone equals the same range of the whole.
//
// The grid: clipping and summation on it. Each example's gradient is clipped to C in float (its
// ghost norm, dp/clip.h), then every entry is scaled by scale / C and rounded to the nearest
// integer, example by example, and the integers are summed exactly (model::Mlp's *_on_grid).
// Adding or removing one example therefore moves the grid sum by exactly that example's integer
// vector, whose L2 norm is at most
//   l2 = scale (1 + eta) + sqrt(d) / 2,
// eta covering the float error of the clipping: the ghost norm sums rows of at most `widest`
// squares (relative error at most (widest + 1) 2^-24 in any order of summation, Higham's
// gamma_n), the factor, the scaling and the products add a few units of 2^-24; eta =
// (4 (widest + 8) + 8) 2^-24 bounds them with room (1.9e-4 for the recipe's 784 inputs), and each
// entry's rounding adds at most 1/2. Noise N_Z(0, s2) with s2 >= (sigma l2)^2 is then the discrete
// Gaussian mechanism at noise multiplier sigma. Its Renyi divergence at every order is at most the
// continuous Gaussian's at the same l2 / sqrt(s2) (Canonne et al.'s bound for one coordinate,
// alpha Delta^2 / (2 s2), summed over independent coordinates), and its privacy loss is a
// function of <X, Delta> whose moment generating function is the continuous one's times a factor
// within 4 exp(-2 pi^2 s2) of 1 (Poisson summation), nothing at s2 >= 2^20. dpgossip therefore
// accounts it as the Gaussian mechanism of multiplier sigma under either accountant; for the
// Poisson-subsampled mechanism (PLD, or RDP's add direction) that rests on this closeness, not on
// a separate proof.
// The scale is the largest power of two up to 2^16 with sigma l2 <= 2^26 (s2 <= 2^52 keeps every
// product inside 128 bits; 2^16 keeps 4096 examples' sums inside int32); the noise is then sigma C
// times l2 / scale (1 + 3.6e-3 for the recipe's 203,530 values at 2^16).
//
// What stays in floating point: each example's forward and backward pass, its loss and its
// norm. The argument above holds for the per-example values as computed, provided one example's
// values do not change when another joins the batch. The GEMM libraries do not give that (their
// kernel and blocking follow the batch size: adding one example moved others' grid values by a
// unit), so on the grid the model computes every example's values row-exact
// (runtime/model/row_exact.h): from its own row and the parameters, by a fixed sequence of
// correctly rounded operations, whatever else the batch holds (tests/unit/model/test_mlp.cc).
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
// With threads > 1 (at most 64) the range is cut into that many contiguous parts, each drawn on a
// thread of its own (parts below 16384 values are not worth a thread): the values are bit for bit
// those of one thread, since each is a function of (key, stream, position) alone.
void add_discrete_gaussian(std::span<std::int64_t> out, std::uint64_t sigma2, const NoiseKey& key,
                           std::uint64_t stream, std::size_t first = 0, int threads = 1);

// The grid and noise of `--secure-noise` for noise multiplier sigma (> 0, finite) over d values of
// a model whose widest layer has `widest` (>= 1) units.
struct NoiseGrid {
  double scale = 0;         // grid steps per clip norm C (a power of two, at most 2^16)
  double l2 = 0;            // L2 sensitivity of the grid sum: scale (1 + eta) + sqrt(d) / 2
  std::uint64_t sigma2 = 0; // the discrete Gaussian's s2: an integer >= (sigma l2)^2
};
// Throws invalid_argument naming noise_multiplier when no scale >= 1 keeps sigma l2 <= 2^26.
NoiseGrid plan_noise_grid(double sigma, std::size_t d, int widest);

// eta above: the float error allowed for in the clipped examples' norms.
double float_allowance(int widest);
// The largest grid scale for sums of clipped examples on the grid: model::Mlp's *_on_grid keep
// int32 sums of up to 4096 examples, each entry at most scale (1 + eta) + 1/2 grid steps.
inline constexpr double kMaxGridScale = 65536.0;  // 2^16

}  // namespace dpg::dp
