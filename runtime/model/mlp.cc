#include "runtime/model/mlp.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/check.h"
#include "runtime/core/error.h"
#include "runtime/core/parts.h"
#include "runtime/core/rng.h"
#include "runtime/model/blas_threads.h"
#include "runtime/model/gemm.h"
#include "runtime/model/kernels.h"
#include "runtime/model/row_exact.h"

namespace dpg::model {

double MlpSpec::param_count() const {
  const std::vector<int> w = widths();
  double n = 0;
  for (std::size_t l = 0; l + 1 < w.size(); ++l) n += (double(w[l]) + 1) * w[l + 1];
  return n;
}

std::vector<int> MlpSpec::widths() const {
  std::vector<int> w{inputs};
  w.insert(w.end(), hidden.begin(), hidden.end());
  w.push_back(classes);
  return w;
}

std::size_t Workspace::row_bytes(const MlpSpec& spec) {
  const std::vector<int> w = spec.widths();
  std::size_t floats = 3;  // loss, act_sq, grad_sq
  for (std::size_t l = 0; l < w.size(); ++l) floats += static_cast<std::size_t>(w[l]);   // act
  for (std::size_t l = 1; l < w.size(); ++l) floats += static_cast<std::size_t>(w[l]);   // grad
  return floats * sizeof(float);
}

void Workspace::resize(const MlpSpec& spec, std::size_t rows) {
  batch = rows;
  if (rows <= capacity && !act.empty()) return;
  // Grow with headroom so Poisson batch sizes rarely reallocate.
  capacity = std::max<std::size_t>(rows + rows / 8, 16);
  const auto widths = spec.widths();
  act.resize(widths.size());
  grad.resize(widths.size() - 1);
  for (std::size_t l = 0; l < widths.size(); ++l) act[l].resize(capacity * widths[l]);
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) grad[l].resize(capacity * widths[l + 1]);
  loss.resize(capacity);
  act_sq.resize(capacity);
  grad_sq.resize(capacity);
}

Mlp::Mlp(MlpSpec spec, std::uint64_t seed) : spec_(std::move(spec)), widths_(spec_.widths()) {
  if (spec_.inputs <= 0 || spec_.classes < 2) {
    fail(Code::invalid_argument, "model: needs at least one input and two classes, got " +
                                     std::to_string(spec_.inputs) + " inputs and " +
                                     std::to_string(spec_.classes) + " classes (from the data's manifest)");
  }
  for (int h : spec_.hidden) {
    if (h <= 0) fail(Code::invalid_argument, "model: hidden widths must be positive");
  }
  std::size_t total = 0;
  for (std::size_t l = 0; l + 1 < widths_.size(); ++l) {
    offsets_.push_back(total);
    total += static_cast<std::size_t>(widths_[l + 1]) * (widths_[l] + 1);
  }
  params_.resize(total);
  Rng rng(seed, stream::kInit);
  for (int l = 0; l < num_layers(); ++l) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(widths_[l]));
    const std::size_t n = static_cast<std::size_t>(widths_[l + 1]) * (widths_[l] + 1);
    for (std::size_t i = 0; i < n; ++i) {
      params_[offsets_[l] + i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
    }
  }
}

std::size_t Mlp::bias_offset(int layer) const {
  return offsets_[layer] + static_cast<std::size_t>(widths_[layer + 1]) * widths_[layer];
}

namespace {

row_exact::Act exact_act(bool last, Activation a) {
  if (last) return row_exact::Act::none;
  return a == Activation::relu ? row_exact::Act::relu : row_exact::Act::tanh;
}

}  // namespace

void Mlp::forward(Workspace& ws) const {
  const auto batch = static_cast<int>(ws.batch);
  if (batch == 0) return;
  for (int l = 0; l < num_layers(); ++l) {
    const int in = widths_[l];
    const int out = widths_[l + 1];
    float* z = ws.act[l + 1].data();
    if (ws.exact_rows) {
      ws.transposed.resize(static_cast<std::size_t>(in) * out);
      row_exact::transpose(params_.data() + weight_offset(l), out, in, ws.transposed.data());
      row_exact::times(ws.act[l].data(), ws.batch, in, ws.transposed.data(), out, z,
                       blas_threads());
      row_exact::bias_act(z, params_.data() + bias_offset(l), ws.batch, out,
                          exact_act(l + 1 == num_layers(), spec_.activation));
      continue;
    }
    // z (batch, out) = act (batch, in) * W^T (in, out)
    sgemm(false, true, batch, out, in, 1.0f, ws.act[l].data(), in,
          params_.data() + weight_offset(l), in, 0.0f, z, out);
    const float* bias = params_.data() + bias_offset(l);
    if (l + 1 == num_layers()) {
      kernels::bias_only(z, bias, batch, out);
    } else if (spec_.activation == Activation::relu) {
      kernels::bias_relu(z, bias, batch, out);
    } else {
      kernels::bias_tanh(z, bias, batch, out);
    }
  }
}

std::size_t Mlp::loss_and_backward(std::span<const std::int32_t> labels, Workspace& ws,
                                   bool backward) const {
  const std::size_t batch = ws.batch;
  DPG_CHECK_EQ(labels.size(), batch);
  if (batch == 0) return 0;
  const int last = num_layers() - 1;
  const auto softmax = ws.exact_rows ? row_exact::softmax_xent : kernels::softmax_xent;
  const std::size_t correct =
      softmax(ws.act.back().data(), labels.data(), batch, spec_.classes, ws.loss.data(),
              backward ? ws.grad[last].data() : nullptr);
  if (!backward) return correct;
  for (int l = last; l >= 1; --l) {
    const int in = widths_[l];
    const int out = widths_[l + 1];
    if (ws.exact_rows) {
      row_exact::times(ws.grad[l].data(), batch, out, params_.data() + weight_offset(l), in,
                       ws.grad[l - 1].data(), blas_threads());
      row_exact::act_backward(ws.grad[l - 1].data(), ws.act[l].data(), batch * in,
                              exact_act(false, spec_.activation));
      continue;
    }
    // grad[l-1] (batch, in) = grad[l] (batch, out) * W_l (out, in), then times act'(.)
    sgemm(false, false, static_cast<int>(batch), in, out, 1.0f, ws.grad[l].data(), out,
          params_.data() + weight_offset(l), in, 0.0f, ws.grad[l - 1].data(), in);
    const std::size_t n = batch * in;
    if (spec_.activation == Activation::relu) {
      kernels::relu_backward(ws.grad[l - 1].data(), ws.act[l].data(), n);
    } else {
      kernels::tanh_backward(ws.grad[l - 1].data(), ws.act[l].data(), n);
    }
  }
  return correct;
}

void Mlp::per_example_sq_norms(Workspace& ws, std::span<float> out) const {
  const std::size_t batch = ws.batch;
  DPG_CHECK_EQ(out.size(), batch);
  std::fill(out.begin(), out.end(), 0.0f);
  std::vector<float>& a2 = ws.act_sq;
  std::vector<float>& g2 = ws.grad_sq;
  for (int l = 0; l < num_layers(); ++l) {
    if (ws.exact_rows) {
      row_exact::row_sq_norms(ws.act[l].data(), batch, widths_[l], a2.data());
      row_exact::row_sq_norms(ws.grad[l].data(), batch, widths_[l + 1], g2.data());
      row_exact::add_layer_norms(out.data(), g2.data(), a2.data(), batch);
      continue;
    }
    kernels::row_sq_norms(ws.act[l].data(), batch, widths_[l], a2.data());
    kernels::row_sq_norms(ws.grad[l].data(), batch, widths_[l + 1], g2.data());
    for (std::size_t i = 0; i < batch; ++i) out[i] += g2[i] * (a2[i] + 1.0f);
  }
}

void Mlp::accumulate_gradient(Workspace& ws, std::span<const float> scale,
                              std::span<float> grad_out) const {
  if (ws.batch == 0) return;
  for (int l = 0; l < num_layers(); ++l) {
    clip_layer(ws, scale, l);
    add_weight_rows(ws, l, 0, widths_[l + 1], grad_out);
    add_bias(ws, l, grad_out);
  }
}

void Mlp::clip_layer(Workspace& ws, std::span<const float> scale, int l) const {
  const std::size_t batch = ws.batch;
  DPG_CHECK(scale.empty() || scale.size() == batch);
  DPG_CHECK(l >= 0 && l < num_layers());
  const int in = widths_[l];
  const int out = widths_[l + 1];
  float* g = ws.grad[l].data();
  float* a = ws.act[l].data();
  for (std::size_t i = 0; i < batch && !scale.empty(); ++i) {
    if (scale[i] == 1.0f) continue;
    if (scale[i] == 0.0f) {
      // A dropped example (non-finite gradient) must not reach the sum even as 0 * inf.
      std::fill(g + i * out, g + (i + 1) * out, 0.0f);
      std::fill(a + i * in, a + (i + 1) * in, 0.0f);
      continue;
    }
    for (int c = 0; c < out; ++c) g[i * out + c] *= scale[i];
  }
}

void Mlp::add_weight_rows(Workspace& ws, int l, int row_begin, int row_end,
                          std::span<float> grad_out) const {
  DPG_CHECK_EQ(grad_out.size(), params_.size());
  DPG_CHECK(l >= 0 && l < num_layers());
  DPG_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= widths_[l + 1]);
  if (ws.batch == 0 || row_begin == row_end) return;
  const int in = widths_[l];
  const int out = widths_[l + 1];
  // dW[rows] (rows, in) += grad[:, rows]^T (rows, batch) * act (batch, in)
  sgemm(true, false, row_end - row_begin, in, static_cast<int>(ws.batch), 1.0f,
        ws.grad[l].data() + row_begin, out, ws.act[l].data(), in, 1.0f,
        grad_out.data() + weight_offset(l) + static_cast<std::size_t>(row_begin) * in, in);
}

void Mlp::add_bias(Workspace& ws, int l, std::span<float> grad_out) const {
  DPG_CHECK_EQ(grad_out.size(), params_.size());
  DPG_CHECK(l >= 0 && l < num_layers());
  const int out = widths_[l + 1];
  const float* g = ws.grad[l].data();
  float* db = grad_out.data() + bias_offset(l);
  for (std::size_t i = 0; i < ws.batch; ++i) {
    const float* row = g + i * out;
#pragma omp simd
    for (int c = 0; c < out; ++c) db[c] += row[c];
  }
}

namespace {

constexpr std::size_t kGridChunk = 4096;  // examples summed in int32 before int64
constexpr int kGridRows = 16;             // weight rows whose int32 sums are kept at once

// acc[k] += round(coef * a[k]) for k < n: one example's entries of one weight row on the grid.
inline void add_rounded(std::int32_t* acc, const float* a, float coef, int n) {
#pragma omp simd
  for (int k = 0; k < n; ++k) acc[k] += static_cast<std::int32_t>(std::nearbyint(coef * a[k]));
}

}  // namespace

void Mlp::accumulate_gradient_on_grid(Workspace& ws, std::span<const float> scale, float to_grid,
                                      std::span<std::int64_t> grid_out) const {
  if (ws.batch == 0) return;
  for (int l = 0; l < num_layers(); ++l) {
    clip_layer(ws, scale, l);
    add_weight_rows_on_grid(ws, l, 0, widths_[l + 1], to_grid, grid_out);
    add_bias_on_grid(ws, l, to_grid, grid_out);
  }
}

void Mlp::add_weight_rows_on_grid(Workspace& ws, int l, int row_begin, int row_end,
                                  float to_grid, std::span<std::int64_t> grid_out) const {
  DPG_CHECK_EQ(grid_out.size(), params_.size());
  DPG_CHECK(l >= 0 && l < num_layers());
  DPG_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= widths_[l + 1]);
  // On several BLAS threads the rows are shared out in blocks: each thread sums its own rows'
  // integers (disjoint values of grid_out), and an integer sum is the same in any order.
  const int threads = std::min(blas_threads(), (row_end - row_begin) / (2 * kGridRows));
  if (threads > 1) {
    const int each = (row_end - row_begin + threads - 1) / threads;
    run_parts(static_cast<std::size_t>((row_end - row_begin + each - 1) / each), [&](std::size_t p) {
      const int b = row_begin + static_cast<int>(p) * each;
      grid_rows(ws, l, b, std::min(row_end, b + each), to_grid, grid_out);
    });
    return;
  }
  grid_rows(ws, l, row_begin, row_end, to_grid, grid_out);
}

void Mlp::grid_rows(Workspace& ws, int l, int row_begin, int row_end, float to_grid,
                    std::span<std::int64_t> grid_out) const {
  const int in = widths_[l];
  const int out = widths_[l + 1];
  const float* g = ws.grad[l].data();
  const float* a = ws.act[l].data();
  std::vector<std::int32_t> sums(static_cast<std::size_t>(kGridRows) * in);
  // A block of rows at a time: their int32 sums stay in cache while every example passes.
  for (int jb = row_begin; jb < row_end; jb += kGridRows) {
    const int rows = std::min(kGridRows, row_end - jb);
    for (std::size_t i0 = 0; i0 < ws.batch; i0 += kGridChunk) {
      std::fill(sums.begin(), sums.end(), 0);
      const std::size_t i1 = std::min(ws.batch, i0 + kGridChunk);
      for (std::size_t i = i0; i < i1; ++i) {
        for (int r = 0; r < rows; ++r) {
          const float coef = to_grid * g[i * out + static_cast<std::size_t>(jb + r)];
          if (coef != 0.0f) add_rounded(sums.data() + static_cast<std::size_t>(r) * in, a + i * in, coef, in);
        }
      }
      std::int64_t* acc = grid_out.data() + weight_offset(l) + static_cast<std::size_t>(jb) * in;
      for (std::size_t k = 0; k < static_cast<std::size_t>(rows) * in; ++k) acc[k] += sums[k];
    }
  }
}

void Mlp::add_bias_on_grid(Workspace& ws, int l, float to_grid,
                           std::span<std::int64_t> grid_out) const {
  DPG_CHECK_EQ(grid_out.size(), params_.size());
  DPG_CHECK(l >= 0 && l < num_layers());
  const int out = widths_[l + 1];
  const float* g = ws.grad[l].data();
  std::vector<std::int32_t> sums(static_cast<std::size_t>(out));
  std::int64_t* db = grid_out.data() + bias_offset(l);
  for (std::size_t i0 = 0; i0 < ws.batch; i0 += kGridChunk) {
    std::fill(sums.begin(), sums.end(), 0);
    const std::size_t i1 = std::min(ws.batch, i0 + kGridChunk);
    for (std::size_t i = i0; i < i1; ++i) add_rounded(sums.data(), g + i * out, to_grid, out);
    for (int c = 0; c < out; ++c) db[c] += sums[static_cast<std::size_t>(c)];
  }
}

Mlp::Evaluation Mlp::evaluate(std::span<const float> x, std::span<const std::int32_t> labels,
                              Workspace& ws) const {
  const std::size_t rows = labels.size();
  DPG_CHECK_EQ(x.size(), rows * static_cast<std::size_t>(spec_.inputs));
  constexpr std::size_t kChunk = 1024;
  Evaluation ev;
  ev.rows = rows;
  for (std::size_t start = 0; start < rows; start += kChunk) {
    const std::size_t n = std::min(kChunk, rows - start);
    ws.resize(spec_, n);
    std::copy_n(x.data() + start * spec_.inputs, n * spec_.inputs, ws.act[0].data());
    forward(ws);
    ev.correct += loss_and_backward(labels.subspan(start, n), ws, false);
    for (std::size_t i = 0; i < n; ++i) ev.loss_sum += ws.loss[i];
  }
  return ev;
}

}  // namespace dpg::model
