// A multilayer perceptron on the CPU: dense layers through BLAS sgemm, float32, softmax
// cross-entropy. This is the reference every faster path is compared against.
//
// Parameters live in one flat vector, layer by layer: W_l (out_l, in_l) row-major, then b_l (out_l).
// The backward pass keeps each layer's output gradient per example, so a per-example gradient norm
// can be had without materialising per-example gradients ("ghost" norms): for a dense layer the
// gradient of example i is g_i a_i^T (plus g_i for the bias), whose squared norm is
// |g_i|^2 (|a_i|^2 + 1).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/train_config.h"

namespace dpg::model {

// The config's enum (runtime/core/train_config.h), parsed there once: relu | tanh.
using Activation = dpg::Activation;

struct MlpSpec {
  int inputs = 0;
  std::vector<int> hidden;
  int classes = 0;
  Activation activation = Activation::relu;

  std::vector<int> widths() const;  // inputs, hidden..., classes
  // Weights and biases, sum over layers of (in + 1) * out; in double, so that a hostile size from
  // a flag or a manifest gives a large figure to refuse, never a wrapped one.
  double param_count() const;
};

// Per-batch buffers, grown on demand and reused from step to step.
struct Workspace {
  // The bytes one row of the batch takes in these buffers (act, grad, loss and the two norms),
  // before resize()'s headroom of an eighth.
  static std::size_t row_bytes(const MlpSpec& spec);
  std::size_t batch = 0;
  std::vector<std::vector<float>> act;   // act[l]: (batch, width_l); act[0] is the input
  std::vector<std::vector<float>> grad;  // grad[l]: (batch, width_{l+1}), dloss_i / dz_{l+1}
  std::vector<float> loss;               // (batch) per-example loss
  std::vector<float> act_sq, grad_sq;    // (batch) row norms, scratch of per_example_sq_norms
  // Every example's values (activations, output gradients, loss, norm) computed from its own row
  // in a fixed order (runtime/model/row_exact.h), not by the GEMM libraries: the same whatever
  // else is in the batch, as secure noise's sensitivity needs. Slower than the GEMMs.
  bool exact_rows = false;
  std::vector<float> transposed;         // exact_rows: a layer's W^T, scratch of forward
  void resize(const MlpSpec& spec, std::size_t batch);
  std::span<float> input() { return {act[0].data(), batch * (act[0].size() / capacity)}; }
  std::size_t capacity = 0;              // rows the buffers hold
};

class Mlp {
 public:
  // PyTorch's default initialisation for nn.Linear: weights and biases U(-1/sqrt(in), 1/sqrt(in)).
  Mlp(MlpSpec spec, std::uint64_t seed);

  const MlpSpec& spec() const { return spec_; }
  std::size_t num_params() const { return params_.size(); }
  std::span<float> params() { return params_; }
  std::span<const float> params() const { return params_; }
  int num_layers() const { return static_cast<int>(spec_.hidden.size()) + 1; }

  // Runs the layers on ws.act[0] (batch, inputs), which the caller fills (see Workspace::input),
  // leaving every layer's output in ws.act and the logits in ws.act.back().
  void forward(Workspace& ws) const;

  // Softmax cross-entropy of the logits in ws against labels: per-example losses into ws.loss and,
  // when `backward` is set, the per-example output gradients of every layer into ws.grad.
  // Returns the number of correct predictions.
  std::size_t loss_and_backward(std::span<const std::int32_t> labels, Workspace& ws,
                                bool backward) const;

  // Squared norm of each example's whole gradient (all layers): out (batch).
  void per_example_sq_norms(Workspace& ws, std::span<float> out) const;

  // grad_out (num_params) += sum_i scale_i * grad_i, with scale = 1 when `scale` is empty.
  // Scales ws.grad rows in place.
  void accumulate_gradient(Workspace& ws, std::span<const float> scale,
                           std::span<float> grad_out) const;
  // accumulate_gradient in pieces, for a gradient handed out while it is being summed: first
  // clip_layer (scales layer l's ws.grad rows by `scale`, zeroing dropped examples), then
  // add_weight_rows and add_bias write disjoint values of grad_out (weight_rows(), bias_range()),
  // in any order. Layers are independent, so any order of layers gives the same sums.
  void clip_layer(Workspace& ws, std::span<const float> scale, int layer) const;
  // grad_out's rows [row_begin, row_end) of dW_l (out_l, in_l) += grad^T act.
  void add_weight_rows(Workspace& ws, int layer, int row_begin, int row_end,
                       std::span<float> grad_out) const;
  void add_bias(Workspace& ws, int layer, std::span<float> grad_out) const;
  // The same sums on an integer grid, for secure noise (dp/discrete_gaussian.h): each example's
  // (already clipped) gradient entry g_ij a_ik, and g_ij for the bias, is rounded to the nearest
  // integer after scaling by to_grid (grid steps per unit), and the integers are summed exactly,
  // whatever the order, into grid_out (num_params). Every |to_grid * g_ij a_ik| must stay below
  // 2^16 + 1 (to_grid <= 2^16 / C on gradients clipped to C): the examples are summed in int32
  // in chunks of 4096, then into int64.
  void accumulate_gradient_on_grid(Workspace& ws, std::span<const float> scale, float to_grid,
                                   std::span<std::int64_t> grid_out) const;
  void add_weight_rows_on_grid(Workspace& ws, int layer, int row_begin, int row_end,
                               float to_grid, std::span<std::int64_t> grid_out) const;
  void add_bias_on_grid(Workspace& ws, int layer, float to_grid,
                        std::span<std::int64_t> grid_out) const;
  // The widest layer (inputs, hidden or classes): how long the rows summed by the ghost norms are.
  int widest() const { return *std::max_element(widths_.begin(), widths_.end()); }

  // Where rows [row_begin, row_end) of W_l, and b_l, sit in the flat vector: [first, second).
  std::pair<std::size_t, std::size_t> weight_rows(int layer, int row_begin, int row_end) const {
    return {offsets_[layer] + static_cast<std::size_t>(row_begin) * widths_[layer],
            offsets_[layer] + static_cast<std::size_t>(row_end) * widths_[layer]};
  }
  std::pair<std::size_t, std::size_t> bias_range(int layer) const {
    return {bias_offset(layer), bias_offset(layer) + static_cast<std::size_t>(widths_[layer + 1])};
  }

  // Loss sum and correct predictions over a whole split, in chunks, without gradients.
  struct Evaluation {
    double loss_sum = 0.0;
    std::size_t correct = 0;
    std::size_t rows = 0;
  };
  Evaluation evaluate(std::span<const float> x, std::span<const std::int32_t> labels,
                      Workspace& ws) const;

 private:
  std::size_t weight_offset(int layer) const { return offsets_[layer]; }
  // add_weight_rows_on_grid's sums for rows [row_begin, row_end), on the calling thread.
  void grid_rows(Workspace& ws, int layer, int row_begin, int row_end, float to_grid,
                 std::span<std::int64_t> grid_out) const;
  std::size_t bias_offset(int layer) const;

  MlpSpec spec_;
  std::vector<int> widths_;
  std::vector<std::size_t> offsets_;
  std::vector<float> params_;
};

}  // namespace dpg::model
