#include "dp/noise.h"

#include <math.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace dpg::dp {
namespace {

// splitmix64's output function: a bijective mix with full avalanche.
inline std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
constexpr std::size_t kBlock = 256;

}  // namespace

void add_gaussian(std::span<float> out, double stddev, std::uint64_t key, float scale,
                  std::size_t first) {
  const std::size_t n = out.size();
  if (n == 0) return;
  const std::uint64_t base = mix(key);
  constexpr std::size_t kHalf = kBlock / 2;
  alignas(64) double u1[kHalf], r[kHalf];
  alignas(64) float angle[kHalf], c[kHalf], s[kHalf];
  const std::size_t end = first + n;  // [first, end): the indices of out in the whole buffer
  for (std::size_t start = first - first % kBlock; start < end; start += kBlock) {
    // Pair j of a block draws counters start + 2j + {1, 2}; its cosine half goes to position j
    // and its sine half to position kHalf + j. Integer hashing and each transcendental function
    // sit in loops of their own so every loop vectorises (GCC cannot vectorise a fused sincos).
#pragma omp simd
    for (std::size_t j = 0; j < kHalf; ++j) {
      const std::uint64_t idx = start + 2 * j;
      const std::uint64_t h1 = mix(base + (idx + 1) * kGolden);
      const std::uint64_t h2 = mix(base + (idx + 2) * kGolden);
      // The radius needs all 53 bits, so its tail reaches 8.6 sd; the angle needs only 24.
      u1[j] = (static_cast<double>(static_cast<std::int64_t>(h1 >> 11)) + 0.5) * 0x1.0p-53;
      angle[j] = static_cast<float>(static_cast<std::int32_t>(h2 >> 40)) *
                 static_cast<float>(2.0 * M_PI * 0x1.0p-24);
    }
#pragma omp simd
    for (std::size_t j = 0; j < kHalf; ++j) r[j] = stddev * sqrt(-2.0 * log(u1[j]));
#pragma omp simd
    for (std::size_t j = 0; j < kHalf; ++j) c[j] = cosf(angle[j]);
#pragma omp simd
    for (std::size_t j = 0; j < kHalf; ++j) s[j] = sinf(angle[j]);
    if (start >= first && end - start >= kBlock) {
      float* o = out.data() + (start - first);
#pragma omp simd
      for (std::size_t j = 0; j < kHalf; ++j) {
        o[j] = (o[j] + static_cast<float>(r[j]) * c[j]) * scale;
        o[kHalf + j] = (o[kHalf + j] + static_cast<float>(r[j]) * s[j]) * scale;
      }
    } else {
      // A block cut by either end of the range: only its positions in [first, end).
      const std::size_t lo = std::max(start, first) - start;
      const std::size_t hi = std::min(start + kBlock, end) - start;
      for (std::size_t k = lo; k < hi && k < kHalf; ++k) {
        float& o = out[start + k - first];
        o = (o + static_cast<float>(r[k]) * c[k]) * scale;
      }
      for (std::size_t k = std::max(lo, kHalf); k < hi; ++k) {
        float& o = out[start + k - first];
        o = (o + static_cast<float>(r[k - kHalf]) * s[k - kHalf]) * scale;
      }
    }
  }
}

}  // namespace dpg::dp
