// A synthetic data set for the training tests.
#pragma once

#include <cstdint>

#include "runtime/core/rng.h"
#include "runtime/data/dataset.h"

namespace dpg::test {

// Two Gaussian blobs per class in 8 dimensions: easy to learn, even with noise.
inline data::Dataset blobs(std::size_t n, std::uint64_t seed) {
  data::Dataset d;
  d.rows = n;
  d.cols = 8;
  d.num_classes = 3;
  Rng rng(seed);
  for (std::size_t i = 0; i < n; ++i) {
    const auto label = static_cast<std::int32_t>(rng.below(3));
    d.labels.push_back(label);
    for (std::size_t j = 0; j < 8; ++j) {
      const double centre = (static_cast<std::size_t>(label) == j % 3) ? 2.0 : 0.0;
      d.features.push_back(static_cast<float>(centre + 0.5 * rng.normal()));
    }
  }
  return d;
}

}  // namespace dpg::test
