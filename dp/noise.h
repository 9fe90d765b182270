// Gaussian noise for the mechanism: counter-based, so a step's noise is a pure function of
// (key, index) — reproducible, vectorisable and splittable across threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace dpg::dp {

// out[i] += stddev * z_i with z_i ~ N(0, 1) i.i.d., drawn by Box-Muller from uniforms hashed from
// (key, i): the radius from 53-bit uniforms in double precision, so the tails reach 8.6 standard
// deviations (a float radius would stop at 5.8 and put the truncated mass in the privacy loss).
// With `scale`, out[i] = (out[i] + stddev * z_i) * scale in the same pass.
// `first` is the index of out[0] in a larger buffer: noising a buffer range by range, each range
// with its own `first`, gives bit for bit the values of noising it whole (z depends only on the
// index), which lets the mechanism release a gradient layer by layer.
void add_gaussian(std::span<float> out, double stddev, std::uint64_t key, float scale = 1.0f,
                  std::size_t first = 0);

}  // namespace dpg::dp
