// Pieces the layers share (runtime/model/layers.h); internal to runtime/model.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/model/layers.h"

namespace dpg::model::layer_util {

// PyTorch's default for a dense or convolution layer's weights and biases:
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
void uniform_fan_in(std::span<float> values, std::size_t fan_in, Rng& rng);

// Throws invalid_argument naming `what` unless every dimension is at least 1.
void check_shape(const Shape& s, const char* what);

// Windows of `kernel` at `stride` along `size` padded by `padding` on each side; throws
// invalid_argument naming `what` for a bad kernel, stride or padding or a window that does not fit.
int window_count(int size, int kernel, int stride, int padding, const char* what);

// The rows (batch, width) of the examples whose scale is not 0, each times its scale, into
// `out`; returns how many. A null scale keeps every row as it is.
inline std::size_t scaled_rows(const float* rows, std::size_t width, const float* scale,
                               std::size_t batch, std::vector<float>& out) {
  out.clear();
  out.reserve(batch * width);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < batch; ++i) {
    const float s = scale ? scale[i] : 1.0f;
    if (s == 0.0f) continue;
    out.resize((kept + 1) * width);
    float* o = out.data() + kept * width;
    for (std::size_t j = 0; j < width; ++j) o[j] = rows[i * width + j] * s;
    ++kept;
  }
  return kept;
}

// The rows of the examples whose scale is not 0, in order: `rows` itself when none is 0,
// else a copy in `out`.
inline const float* kept_rows(const float* rows, std::size_t width, const float* scale,
                              std::size_t batch, std::vector<float>& out) {
  bool all = true;
  for (std::size_t i = 0; scale && i < batch; ++i) all = all && scale[i] != 0.0f;
  if (all) return rows;
  out.clear();
  for (std::size_t i = 0; i < batch; ++i) {
    if (scale[i] == 0.0f) continue;
    out.insert(out.end(), rows + i * width, rows + (i + 1) * width);
  }
  return out.data();
}

}  // namespace dpg::model::layer_util
