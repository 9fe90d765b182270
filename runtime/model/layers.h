// Layers of a sequential model on the CPU, each with what DP-SGD needs of it: the forward and
// backward passes over a batch, every example's squared gradient norm for this layer's
// parameters, and the sum of the examples' gradients each scaled by its clipping factor.
//
// An example's tensor is channels x height x width, row-major (a dense layer's features are
// channels with height and width 1), and a batch is its examples one after the other. A layer's
// parameters are a slice of the model's flat vector, handed to each call.
//
// Per-example norms without per-example gradients where that is cheaper. A dense layer's is
// |g_i|^2 (|a_i|^2 + 1) (runtime/model/mlp.h). A convolution's weight gradient for example i
// is G_i A_i, with A_i (T x P) the im2col patches of its T output positions and G_i (O x T) the
// output gradient, so its squared norm is the "ghost" <A_i A_i^T, G_i^T G_i> over T x T entries
// (Li et al. 2022; Bu et al. 2022's mixed ghost clipping), which costs about 2 T^2 (O + P)
// against O P T for the gradient itself: each convolution chooses at construction, ghost where
// 2 T^2 <= O P (the weights), materialised otherwise (norm_method()).
//
// Examples whose clipping factor is 0 (a dropped row, one whose values are not finite) add
// nothing to a sum: they are skipped, never multiplied by 0 (a NaN times 0 is NaN).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "runtime/core/rng.h"
#include "runtime/core/train_config.h"

namespace dpg::model {

// One example's tensor: channels x height x width.
struct Shape {
  int c = 0;
  int h = 1;
  int w = 1;
  std::size_t size() const {
    return static_cast<std::size_t>(c) * static_cast<std::size_t>(h) * static_cast<std::size_t>(w);
  }
  bool operator==(const Shape&) const = default;
};
std::string to_string(const Shape& s);  // "16x13x13"

// How a layer computes its examples' gradient norms.
enum class NormMethod {
  none,          // no parameters
  ghost,         // from the activations and output gradients, no per-example gradient
  materialised,  // each example's gradient made, then its norm
};
const char* to_string(NormMethod m);

class Layer {
 public:
  virtual ~Layer() = default;
  // What it is, as the start-up log and a model description print it: "conv 16 8x8 stride 2 pad 2".
  virtual std::string describe() const = 0;
  virtual Shape in_shape() const = 0;
  virtual Shape out_shape() const = 0;
  virtual std::size_t param_count() const { return 0; }
  virtual NormMethod norm_method() const { return NormMethod::none; }
  // This layer's starting parameters (PyTorch's defaults for its kind).
  virtual void init(std::span<float> params, Rng& rng) const;
  // out (batch, out) from in (batch, in).
  virtual void forward(std::span<const float> params, const float* in, float* out,
                       std::size_t batch) const = 0;
  // grad_in (batch, in) from grad_out (batch, out) and the forward pass's in and out.
  virtual void backward(std::span<const float> params, const float* in, const float* out,
                        const float* grad_out, float* grad_in, std::size_t batch) const = 0;
  // sq[i] += the squared norm of example i's gradient of this layer's parameters.
  virtual void add_sq_norms(std::span<const float> params, const float* in,
                            const float* grad_out, std::size_t batch, float* sq) const;
  // grad (param_count) += sum_i scale[i] * example i's gradient of this layer's parameters,
  // skipping the examples whose scale is 0.
  virtual void add_gradient(std::span<const float> params, const float* in,
                            const float* grad_out, const float* scale, std::size_t batch,
                            std::span<float> grad) const;
};

// A dense layer on the flattened input: W (out, in) then b (out).
std::unique_ptr<Layer> dense(Shape in, int out);
// A 2-D convolution, kernel x kernel, with zero padding: W (out_channels, c, kernel, kernel)
// then b (out_channels). `norms` forces a method (tests); none chooses by the rule above.
std::unique_ptr<Layer> conv2d(Shape in, int out_channels, int kernel, int stride, int padding,
                              NormMethod norms = NormMethod::none);
// Max and average pooling over kernel x kernel windows, no padding (a window past the edge is
// not taken: PyTorch's floor mode). Max passes the gradient to the first largest of a window.
std::unique_ptr<Layer> max_pool(Shape in, int kernel, int stride);
std::unique_ptr<Layer> avg_pool(Shape in, int kernel, int stride);
// Group norm: the channels in `groups` groups, each normalised over its channels and positions
// per example (eps 1e-5), then with `affine` a learned scale and shift per channel (gamma
// starting at 1, beta at 0). Without it the layer has no parameters and is data-independent
// post-processing of each example on its own.
std::unique_ptr<Layer> group_norm(Shape in, int groups, bool affine);
std::unique_ptr<Layer> activation(Shape in, Activation a);
// The same values as one vector of c*h*w features.
std::unique_ptr<Layer> flatten(Shape in);

}  // namespace dpg::model
