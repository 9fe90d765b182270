// The key of `--secure-noise` (docs/PRIVACY.md, "The noise modes").
//
// The default noise (noise.h) hashes (key, index) with splitmix64 and the key comes from a 64-bit
// seed: statistically sound, but whoever sees enough outputs, or guesses the seed, can predict the
// rest, and 64 bits of seed can be searched. Secure noise takes its words from ChaCha20's keystream
// (OpenSSL's libcrypto, dp/value_stream.h) under a 256-bit key drawn from getrandom(2) and never
// written anywhere: without the key, the noise of one step says nothing about another's, and no
// seed can be searched. The noise itself is integer: the discrete Gaussian on a fixed-point grid
// (dp/discrete_gaussian.h), or under secure aggregation the Skellam (dp/skellam.h).
#pragma once

#include <array>
#include <cstdint>

namespace dpg::dp {

// 256 bits from the operating system (getrandom(2), blocking until the pool is ready). Throws
// dpg::Error(unavailable) when the kernel cannot supply them.
struct NoiseKey {
  std::array<unsigned char, 32> bytes{};
  static NoiseKey from_os();
  // A key spread from 64 bits: for tests (reproducible noise), and for secure aggregation's
  // Skellam noise without --secure-noise, keyed each step from the seeded generator as the
  // default Gaussian noise is (no stronger than that 64-bit seed).
  static NoiseKey fixed(std::uint64_t value);
};

}  // namespace dpg::dp
