#include "dp/noise.h"

#include <math.h>

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

void add_gaussian(std::span<float> out, double stddev, std::uint64_t key) {
  const std::size_t n = out.size();
  const std::uint64_t base = mix(key);
  constexpr std::size_t kPairs = kBlock / 2;
  double u1[kPairs], u2[kPairs], r[kPairs], c[kPairs], s[kPairs];
  for (std::size_t start = 0; start < n; start += kBlock) {
    const std::uint64_t first = start;  // pair j of this block uses counters start + 2j + {1, 2}
    // Integer hashing and the transcendental functions sit in separate loops so both vectorise.
#pragma omp simd
    for (std::size_t j = 0; j < kPairs; ++j) {
      const std::uint64_t idx = first + 2 * j;
      const std::uint64_t h1 = mix(base + (idx + 1) * kGolden);
      const std::uint64_t h2 = mix(base + (idx + 2) * kGolden);
      u1[j] = (static_cast<double>(static_cast<std::int64_t>(h1 >> 11)) + 0.5) * 0x1.0p-53;
      u2[j] = static_cast<double>(static_cast<std::int64_t>(h2 >> 11)) * 0x1.0p-53;
    }
    // One function per loop: fused, GCC turns cos and sin into a sincos it cannot vectorise.
#pragma omp simd
    for (std::size_t j = 0; j < kPairs; ++j) r[j] = stddev * sqrt(-2.0 * log(u1[j]));
#pragma omp simd
    for (std::size_t j = 0; j < kPairs; ++j) c[j] = cos(2.0 * M_PI * u2[j]);
#pragma omp simd
    for (std::size_t j = 0; j < kPairs; ++j) s[j] = sin(2.0 * M_PI * u2[j]);
    const std::size_t m = (n - start < kBlock) ? n - start : kBlock;
    float* o = out.data() + start;
    for (std::size_t k = 0; k < m; ++k) {
      const std::size_t j = k / 2;
      o[k] += static_cast<float>(r[j] * ((k & 1) ? s[j] : c[j]));
    }
  }
}

}  // namespace dpg::dp
