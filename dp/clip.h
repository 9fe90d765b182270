// Per-example clipping factors from per-example gradient norms.
#pragma once

#include <cstddef>
#include <span>

namespace dpg::dp {

// scale_i = min(1, C / |g_i|) from squared norms; a non-finite norm gives scale 0 (the example is
// dropped from the sum). Returns how many examples were dropped.
std::size_t clip_factors(std::span<const float> sq_norms, float clip_norm, std::span<float> scale);

}  // namespace dpg::dp
