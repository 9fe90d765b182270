// Gaussian noise from a cryptographic generator, for `--secure-noise` (docs/PRIVACY.md).
//
// The default noise (noise.h) hashes (key, index) with splitmix64 and the key comes from a 64-bit
// seed: statistically sound, but whoever sees enough outputs, or guesses the seed, can predict the
// rest, and 64 bits of seed can be searched. Here the uniforms are ChaCha20's keystream (OpenSSL's
// libcrypto) under a 256-bit key drawn from getrandom(2) and never written anywhere: without the
// key, the noise of one step says nothing about another's, and no seed can be searched.
//
// The generator is still counter-based: the keystream block of output i is block i / 8 (a 64-byte
// block holds the 8 uniforms of 4 Box-Muller pairs) under the nonce (stream), so noising a buffer
// range by range gives bit for bit what noising it whole gives, as add_gaussian does.
//
// What this does not close: the Gaussian is still computed in floating point and added to a float
// sum, so the low-order bits of a released value depend on the un-noised value (Mironov 2012's
// attack on textbook Laplace, and its Gaussian analogues). docs/PRIVACY.md states this limit.
// Box-Muller runs in double precision with 53-bit uniforms for both the radius and the angle, so
// the noise reaches 8.6 standard deviations and its lattice is 2^-53 fine, not the float's 2^-24.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

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

// out[i] = (out[i] + stddev * z_i) * scale, with z_i ~ N(0, 1) drawn from ChaCha20(key, nonce =
// stream) at position first + i. Throws dpg::Error(internal) if libcrypto fails, and
// invalid_argument when the range passes 2^35 values (the 32-bit block counter's reach).
void add_gaussian_secure(std::span<float> out, double stddev, const NoiseKey& key,
                         std::uint64_t stream, float scale = 1.0f, std::size_t first = 0);

}  // namespace dpg::dp
