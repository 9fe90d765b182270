#include "runtime/model/kernels.h"

#include <algorithm>
#include <math.h>

#include <cmath>

namespace dpg::model::kernels {

void bias_relu(float* z, const float* bias, std::size_t rows, std::size_t cols) {
  for (std::size_t r = 0; r < rows; ++r) {
    float* row = z + r * cols;
#pragma omp simd
    for (std::size_t c = 0; c < cols; ++c) row[c] = std::max(row[c] + bias[c], 0.0f);
  }
}

void bias_tanh(float* z, const float* bias, std::size_t rows, std::size_t cols) {
  for (std::size_t r = 0; r < rows; ++r) {
    float* row = z + r * cols;
#pragma omp simd
    for (std::size_t c = 0; c < cols; ++c) row[c] = tanhf(row[c] + bias[c]);
  }
}

void bias_only(float* z, const float* bias, std::size_t rows, std::size_t cols) {
  for (std::size_t r = 0; r < rows; ++r) {
    float* row = z + r * cols;
#pragma omp simd
    for (std::size_t c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

void relu_backward(float* g, const float* a, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) g[i] = a[i] > 0.0f ? g[i] : 0.0f;
}

void tanh_backward(float* g, const float* a, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) g[i] *= 1.0f - a[i] * a[i];
}

std::size_t argmax(const float* z, std::size_t classes) {
  std::size_t best = 0;
  for (std::size_t c = 1; c < classes; ++c) {
    if (z[c] > z[best]) best = c;
  }
  return best;
}

std::size_t softmax_xent(const float* logits, const std::int32_t* labels, std::size_t rows,
                         std::size_t classes, float* loss, float* grad) {
  std::size_t correct = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const float* z = logits + r * classes;
    const std::size_t best = argmax(z, classes);
    const float zmax = z[best];
    float sum = 0.0f;
    for (std::size_t c = 0; c < classes; ++c) sum += expf(z[c] - zmax);
    const auto label = static_cast<std::size_t>(labels[r]);
    loss[r] = std::log(sum) + zmax - z[label];
    correct += (best == label) ? 1 : 0;
    if (grad != nullptr) {
      float* g = grad + r * classes;
      const float inv = 1.0f / sum;
      for (std::size_t c = 0; c < classes; ++c) g[c] = expf(z[c] - zmax) * inv;
      g[label] -= 1.0f;
    }
  }
  return correct;
}

void row_sq_norms(const float* x, std::size_t rows, std::size_t cols, float* out) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (std::size_t c = 0; c < cols; ++c) s += row[c] * row[c];
    out[r] = s;
  }
}

}  // namespace dpg::model::kernels
