#include "dp/discrete_gaussian.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "dp/checks.h"
#include "dp/value_stream.h"
#include "runtime/core/error.h"
#include "runtime/core/parts.h"

namespace dpg::dp {
namespace {

using checks::bad_argument;
using checks::str;
using u128 = unsigned __int128;

constexpr StreamTags kTags{4, 5, 6};
constexpr std::size_t kBlocksPerValue = 4;
constexpr double kMaxSigmaOnGrid = 67108864.0;     // 2^26: s2 <= 2^52
constexpr double kMaxScale = kMaxGridScale;
constexpr std::uint64_t kMaxGeometric = 1ULL << 30;
constexpr std::uint64_t kMaxBernoulliTerms = 1ULL << 20;

int bit_length(u128 v) {
  const auto hi = static_cast<std::uint64_t>(v >> 64);
  if (hi != 0) return 128 - std::countl_zero(hi);
  return 64 - std::countl_zero(static_cast<std::uint64_t>(v));
}

// The value's words as a stream of bits: a draw takes only the bits it needs (most need a few).
class Bits {
 public:
  explicit Bits(ValueWords& w) : w_(w) {}
  // `n` (1 to 64) uniform bits.
  std::uint64_t take(int n) {
    if (n > left_) {
      // The bits left and the low bits of a fresh word.
      const int have = left_;
      const std::uint64_t low = buf_ & ((std::uint64_t{1} << have) - 1);
      buf_ = w_.next();
      left_ = 64;
      return low | (take(n - have) << have);
    }
    const std::uint64_t r = n == 64 ? buf_ : buf_ & ((std::uint64_t{1} << n) - 1);
    buf_ = n == 64 ? 0 : buf_ >> n;
    left_ -= n;
    return r;
  }

 private:
  ValueWords& w_;
  std::uint64_t buf_ = 0;
  int left_ = 0;
};

// A uniform integer in [0, m), m >= 1: bit_length(m - 1) bits, rejected while >= m (each try
// succeeds with probability > 1/2). 64-bit arithmetic wherever m fits it.
std::uint64_t uniform_below(Bits& b, std::uint64_t m) {
  if (m <= 1) return 0;
  const int bits = std::bit_width(m - 1);
  for (;;) {
    const std::uint64_t r = b.take(bits);
    if (r < m) return r;
  }
}

u128 uniform_below(Bits& b, u128 m) {
  if (m >> 64 == 0) return uniform_below(b, static_cast<std::uint64_t>(m));
  const int high = bit_length(m - 1) - 64;
  for (;;) {
    const u128 r = b.take(64) | static_cast<u128>(b.take(high)) << 64;
    if (r < m) return r;
  }
}

// Bernoulli(exp(-num / den)) for num <= den (Canonne et al., Algorithm 1, gamma in [0, 1]).
// UInt is std::uint64_t where den * kMaxBernoulliTerms fits it, else u128.
template <class UInt>
bool bernoulli_exp_at_most_one(Bits& w, UInt num, UInt den) {
  if (num == 0) return true;
  std::uint64_t k = 1;
  // A_k ~ Bernoulli(num / (den k)); K, the first k with A_k = 0, is odd with probability e^-g.
  while (uniform_below(w, den * k) < num) {
    if (++k > kMaxBernoulliTerms) fail(Code::internal, "discrete gaussian: Bernoulli series ran on");
  }
  return (k & 1) == 1;
}

// Bernoulli(exp(-1)).
bool bernoulli_exp_minus_one(Bits& w) {
  return bernoulli_exp_at_most_one<std::uint64_t>(w, 1, 1);
}

// Bernoulli(exp(-num / den)) for any num >= 0, den >= 1: floor(g) draws of Bernoulli(e^-1) (the
// first 0 ends it), then the fractional part.
template <class UInt>
bool bernoulli_exp(Bits& w, UInt num, UInt den) {
  while (num >= den) {
    if (!bernoulli_exp_minus_one(w)) return false;
    num -= den;
  }
  return bernoulli_exp_at_most_one<UInt>(w, num, den);
}

// The discrete Laplace of scale t >= 1: P(X = x) proportional to exp(-|x| / t) (Algorithm 2).
std::int64_t discrete_laplace(Bits& w, std::uint64_t t) {
  for (;;) {
    const std::uint64_t u = uniform_below(w, t);
    if (!bernoulli_exp<std::uint64_t>(w, u, t)) continue;  // t k < 2^47
    std::uint64_t v = 0;
    while (bernoulli_exp_minus_one(w) && v <= kMaxGeometric) ++v;
    if (v > kMaxGeometric) continue;  // probability below exp(-2^30)
    const std::uint64_t x = u + t * v;  // < 2^27 * 2^30: no overflow
    const bool negative = w.take(1) != 0;
    if (negative && x == 0) continue;
    return negative ? -static_cast<std::int64_t>(x) : static_cast<std::int64_t>(x);
  }
}

// The discrete Gaussian N_Z(0, s2) (Algorithm 3).
std::int64_t discrete_gaussian(Bits& w, std::uint64_t s2, std::uint64_t t, u128 den) {
  for (;;) {
    const std::int64_t y = discrete_laplace(w, t);
    const u128 a = static_cast<u128>(static_cast<std::uint64_t>(y < 0 ? -y : y)) * t;
    const u128 diff = a >= s2 ? a - s2 : s2 - a;
    // Acceptance exp(-diff^2 / den) with den < 2^106: below exp(-2^22) from diff = 2^64 on.
    if (diff >> 64 != 0) continue;
    if (bernoulli_exp<u128>(w, diff * diff, den)) return y;
  }
}

std::uint64_t isqrt(std::uint64_t n) {
  auto r = static_cast<std::uint64_t>(std::sqrt(static_cast<double>(n)));
  while (static_cast<u128>(r) * r > n) --r;
  while (static_cast<u128>(r + 1) * (r + 1) <= n) ++r;
  return r;
}

}  // namespace

void add_discrete_gaussian(std::span<std::int64_t> out, std::uint64_t sigma2, const NoiseKey& key,
                           std::uint64_t stream, std::size_t first, int threads) {
  if (sigma2 < 1 || sigma2 > kMaxDiscreteGaussianVariance) {
    bad_argument("sigma2 (discrete Gaussian variance parameter) must be in [1, 2^52], got " +
                 std::to_string(sigma2));
  }
  if (threads < 1 || threads > 64) {
    bad_argument("threads must be in [1, 64], got " + std::to_string(threads));
  }
  constexpr std::size_t kPerThread = 16384;
  const std::size_t parts =
      std::min<std::size_t>(static_cast<std::size_t>(threads), std::max<std::size_t>(1, out.size() / kPerThread));
  if (parts > 1) {
    // Contiguous parts (core/parts.h); a failure is rethrown once all have ended.
    const std::size_t each = (out.size() + parts - 1) / parts;
    run_parts(parts, [&](std::size_t k) {
      const std::size_t b = k * each, e = std::min(out.size(), b + each);
      add_discrete_gaussian(out.subspan(b, e - b), sigma2, key, stream, first + b, 1);
    });
    return;
  }
  const std::uint64_t t = isqrt(sigma2) + 1;
  const u128 den = static_cast<u128>(2 * sigma2) * t * t;
  for_each_value(key, stream, kTags, kBlocksPerValue, first, out.size(), "discrete gaussian noise",
                 [&](std::size_t i, ValueWords& w) {
                   Bits bits(w);
                   const std::int64_t x = discrete_gaussian(bits, sigma2, t, den);
                   std::int64_t sum = 0;
                   if (__builtin_add_overflow(out[i], x, &sum)) {
                     bad_argument("discrete gaussian noise: value " + std::to_string(first + i) +
                                  " leaves the int64 range");
                   }
                   out[i] = sum;
                 });
}

double float_allowance(int widest) {
  return (4.0 * (static_cast<double>(widest) + 8.0) + 8.0) * 0x1.0p-24;
}

NoiseGrid plan_noise_grid(double sigma, std::size_t d, int widest) {
  if (!(sigma > 0.0 && std::isfinite(sigma))) {
    bad_argument("noise_multiplier must be finite and > 0 for secure noise, got " + str(sigma));
  }
  if (widest < 1) bad_argument("widest (layer width) must be >= 1, got " + std::to_string(widest));
  const double eta = float_allowance(widest);
  const double half_root = 0.5 * std::sqrt(static_cast<double>(d));
  for (double scale = kMaxScale; scale >= 1.0; scale /= 2.0) {
    const double l2 = scale * (1.0 + eta) + half_root;
    const double s = sigma * l2;
    if (s > kMaxSigmaOnGrid) continue;
    // An integer at or above (sigma l2)^2 whatever the rounding of the product: one more.
    const auto sigma2 = static_cast<std::uint64_t>(std::ceil(s * s)) + 1;
    if (sigma2 > kMaxDiscreteGaussianVariance) continue;
    return NoiseGrid{scale, l2, sigma2};
  }
  bad_argument("noise_multiplier " + str(sigma) + " is too large for secure noise's grid over " +
               std::to_string(d) + " values: sigma (1 + sqrt(d) / 2) must be at most 2^26");
}

}  // namespace dpg::dp
