#include "runtime/model/row_exact.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/parts.h"
#include "runtime/model/kernels.h"

namespace dpg::model::row_exact {
namespace {

// A tile of the product: kRows rows by kCols outputs, whose sums stay in registers while the k
// products pass (6 x 64 floats: 24 AVX-512 registers, with 4 more for a row of b, each value of
// which serves all six rows). Only the speed depends on these: every output is its own chain of
// fmas.
constexpr std::size_t kRows = 6;
constexpr std::size_t kCols = 64;

// One tile of `rows` by `cols` outputs; a full one (kRows by kCols) has constant bounds, which
// the compiler vectorises across j. Every output is the same chain of fmas either way.
template <bool kFull>
void tile(const float* a, std::size_t lda, std::size_t rows, std::size_t k, const float* b,
          std::size_t ldb, std::size_t cols, float* c, std::size_t ldc) {
  if constexpr (kFull) rows = kRows, cols = kCols;
  float acc[kRows][kCols] = {};
  for (std::size_t p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    float x[kRows];
    for (std::size_t r = 0; r < rows; ++r) x[r] = a[r * lda + p];
    // Each value of b's row once, for every row of the tile.
    for (std::size_t j = 0; j < cols; ++j) {
      const float bj = bp[j];
      for (std::size_t r = 0; r < rows; ++r) acc[r][j] = std::fma(x[r], bj, acc[r][j]);
    }
  }
  for (std::size_t r = 0; r < rows; ++r) std::copy_n(acc[r], cols, c + r * ldc);
}

}  // namespace

void times(const float* a, std::size_t rows, std::size_t k, const float* b, std::size_t n,
           float* c, int threads) {
  constexpr std::size_t kMinRows = 64;
  const std::size_t parts = std::min<std::size_t>(
      static_cast<std::size_t>(std::max(threads, 1)), std::max<std::size_t>(1, rows / kMinRows));
  if (parts > 1) {
    // Blocks of whole tiles (core/parts.h).
    const std::size_t each = (rows + parts - 1) / parts;
    const std::size_t block = (each + kRows - 1) / kRows * kRows;
    run_parts((rows + block - 1) / block, [=](std::size_t p) {
      const std::size_t first = p * block;
      times(a + first * k, std::min(block, rows - first), k, b, n, c + first * n, 1);
    });
    return;
  }
  for (std::size_t j0 = 0; j0 < n; j0 += kCols) {
    const std::size_t cols = std::min(kCols, n - j0);
    for (std::size_t i0 = 0; i0 < rows; i0 += kRows) {
      const std::size_t nr = std::min(kRows, rows - i0);
      if (nr == kRows && cols == kCols) {
        tile<true>(a + i0 * k, k, nr, k, b + j0, n, cols, c + i0 * n + j0, n);
      } else {
        tile<false>(a + i0 * k, k, nr, k, b + j0, n, cols, c + i0 * n + j0, n);
      }
    }
  }
}

void transpose(const float* w, std::size_t rows, std::size_t cols, float* out) {
  constexpr std::size_t kBlock = 32;
  for (std::size_t i0 = 0; i0 < rows; i0 += kBlock) {
    for (std::size_t j0 = 0; j0 < cols; j0 += kBlock) {
      const std::size_t i1 = std::min(rows, i0 + kBlock), j1 = std::min(cols, j0 + kBlock);
      for (std::size_t i = i0; i < i1; ++i) {
        for (std::size_t j = j0; j < j1; ++j) out[j * rows + i] = w[i * cols + j];
      }
    }
  }
}

void bias_act(float* z, const float* bias, std::size_t rows, std::size_t cols, Act act) {
  for (std::size_t r = 0; r < rows; ++r) {
    float* row = z + r * cols;
    for (std::size_t c = 0; c < cols; ++c) {
      const float v = row[c] + bias[c];
      row[c] = act == Act::relu ? std::max(v, 0.0f) : act == Act::tanh ? std::tanh(v) : v;
    }
  }
}

void act_backward(float* g, const float* a, std::size_t n, Act act) {
  if (act == Act::relu) {
    for (std::size_t i = 0; i < n; ++i) g[i] = a[i] > 0.0f ? g[i] : 0.0f;
  } else if (act == Act::tanh) {
    for (std::size_t i = 0; i < n; ++i) g[i] *= 1.0f - a[i] * a[i];
  }
}

std::size_t softmax_xent(const float* logits, const std::int32_t* labels, std::size_t rows,
                         std::size_t classes, float* loss, float* grad) {
  std::size_t correct = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const float* z = logits + r * classes;
    const std::size_t best = kernels::argmax(z, classes);
    const float zmax = z[best];
    float sum = 0.0f;
    for (std::size_t c = 0; c < classes; ++c) sum += std::exp(z[c] - zmax);
    const auto label = static_cast<std::size_t>(labels[r]);
    loss[r] = std::log(sum) + zmax - z[label];
    correct += best == label ? 1 : 0;
    if (grad != nullptr) {
      float* g = grad + r * classes;
      const float inv = 1.0f / sum;
      for (std::size_t c = 0; c < classes; ++c) g[c] = std::exp(z[c] - zmax) * inv;
      g[label] -= 1.0f;
    }
  }
  return correct;
}

void row_sq_norms(const float* x, std::size_t rows, std::size_t cols, float* out) {
  constexpr std::size_t kLanes = 16;
  for (std::size_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    float s[kLanes] = {};
    std::size_t c = 0;
    for (; c + kLanes <= cols; c += kLanes) {
      for (std::size_t l = 0; l < kLanes; ++l) s[l] = std::fma(row[c + l], row[c + l], s[l]);
    }
    for (std::size_t l = 0; c + l < cols; ++l) s[l] = std::fma(row[c + l], row[c + l], s[l]);
    for (std::size_t half = kLanes / 2; half > 0; half /= 2) {
      for (std::size_t l = 0; l < half; ++l) s[l] += s[l + half];
    }
    out[r] = s[0];
  }
}

void add_layer_norms(float* out, const float* g2, const float* a2, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] += g2[i] * (a2[i] + 1.0f);
}

}  // namespace dpg::model::row_exact
