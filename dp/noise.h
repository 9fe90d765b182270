// Gaussian noise for the mechanism: counter-based, so a step's noise is a pure function of
// (key, index) — reproducible, vectorisable and splittable across threads.
#pragma once

#include <cstdint>
#include <span>

namespace dpg::dp {

// out[i] += stddev * z_i with z_i ~ N(0, 1) i.i.d., drawn by Box-Muller in double precision from
// 53-bit uniforms hashed from (key, i). Tails reach beyond 8 standard deviations.
void add_gaussian(std::span<float> out, double stddev, std::uint64_t key);

}  // namespace dpg::dp
