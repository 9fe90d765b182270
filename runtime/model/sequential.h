// A model as a sequence of layers (runtime/model/layers.h) ending in class logits, trained with
// softmax cross-entropy: the flat parameter vector the algorithms see (each layer's slice in
// order), and what DP-SGD asks of a model: every example's loss and output gradients, its
// squared gradient norm over all layers, and the clipped sum. Its presets name the published
// models (`cnn`: Tramer and Boneh 2021's end-to-end CNN for 28x28 images).
//
// A dense-tanh-dense Sequential is the MLP of runtime/model/mlp.h: the same parameter layout
// (each layer's W (out, in) then b (out)) and, from the same seed, the same starting values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/model/layers.h"
#include "runtime/model/mlp.h"

namespace dpg::model {

// A batch's buffers, grown on demand and reused.
struct Pass {
  std::size_t batch = 0;
  std::vector<std::vector<float>> act;   // act[l]: the input of layer l (act[0] the batch's
                                         // examples, filled by the caller); act.back() logits
  std::vector<std::vector<float>> grad;  // grad[l]: dloss_i / d act[l + 1], per example
  std::vector<float> loss;               // (batch) per-example loss
};

class Sequential {
 public:
  // The layers in order, the last one's output the `classes` logits; parameters from `seed`
  // (the init stream), each layer's as PyTorch starts it. Throws invalid_argument when a
  // layer's input is not the previous one's output, or the last output is not the classes.
  Sequential(std::vector<std::unique_ptr<Layer>> layers, int classes, std::uint64_t seed);

  std::size_t num_params() const { return params_.size(); }
  std::span<float> params() { return params_; }
  std::span<const float> params() const { return params_; }
  Shape input() const { return layers_.front()->in_shape(); }
  int classes() const { return classes_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  // One line per layer: what it is, its output shape, its parameters and how its norms are made.
  std::vector<std::string> describe() const;

  // Sizes the buffers for `batch` examples (act[0] to be filled by the caller).
  void resize(Pass& pass, std::size_t batch) const;
  void forward(Pass& pass) const;
  // Per-example losses into pass.loss and, when `backward`, every layer's output gradients.
  // Returns the correct predictions.
  std::size_t loss_and_backward(std::span<const std::int32_t> labels, Pass& pass,
                                bool backward) const;
  // out[i] = example i's squared gradient norm over every layer.
  void per_example_sq_norms(const Pass& pass, std::span<float> out) const;
  // grad_out (num_params) += sum_i scale_i grad_i (scale empty: 1), skipping zero scales.
  void accumulate_gradient(const Pass& pass, std::span<const float> scale,
                           std::span<float> grad_out) const;

  // Loss sum and correct predictions over a whole split, as the MLP's.
  using Evaluation = Mlp::Evaluation;
  Evaluation evaluate(std::span<const float> x, std::span<const std::int32_t> labels,
                      Pass& pass) const;

 private:
  std::span<const float> slice(std::size_t l) const {
    return std::span<const float>(params_).subspan(offsets_[l], layers_[l]->param_count());
  }
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::size_t> offsets_;
  std::vector<float> params_;
  int classes_;
};

// The layers of a named preset for `input` examples and `classes` classes: "cnn" (conv 16 8x8
// stride 2 pad 2, max pool 2 stride 1, conv 32 4x4 stride 2, max pool 2 stride 1, dense 32,
// dense to the classes, tanh after each convolution and the hidden dense layer). Throws
// invalid_argument naming the preset for an unknown name or an input it cannot take.
std::vector<std::unique_ptr<Layer>> preset_layers(const std::string& name, Shape input,
                                                  int classes);

}  // namespace dpg::model
