#include "dp/clip.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/check.h"

namespace dpg::dp {

std::size_t clip_factors(std::span<const float> sq_norms, float clip_norm, std::span<float> scale) {
  DPG_CHECK_EQ(sq_norms.size(), scale.size());
  DPG_CHECK(clip_norm > 0.0f);
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < sq_norms.size(); ++i) {
    const float n2 = sq_norms[i];
    if (!std::isfinite(n2)) {
      scale[i] = 0.0f;
      ++dropped;
      continue;
    }
    const float norm = std::sqrt(n2);
    // Opacus's rule; the 1e-6 keeps a zero gradient finite and every clipped norm below C.
    scale[i] = std::min(1.0f, clip_norm / (norm + 1e-6f));
  }
  return dropped;
}

}  // namespace dpg::dp
