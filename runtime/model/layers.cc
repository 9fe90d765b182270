// The layers without a convolution's or a norm's arithmetic: dense, the activations, flatten,
// pooling (runtime/model/layers.h).
#include "runtime/model/layers.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/model/gemm.h"
#include "runtime/model/kernels.h"
#include "runtime/model/layer_util.h"

namespace dpg::model {

std::string to_string(const Shape& s) {
  return std::to_string(s.c) + "x" + std::to_string(s.h) + "x" + std::to_string(s.w);
}

const char* to_string(NormMethod m) {
  switch (m) {
    case NormMethod::none: return "none";
    case NormMethod::ghost: return "ghost";
    case NormMethod::materialised: return "materialised";
  }
  return "?";
}

void Layer::init(std::span<float>, Rng&) const {}
void Layer::add_sq_norms(std::span<const float>, const float*, const float*, std::size_t,
                         float*) const {}
void Layer::add_gradient(std::span<const float>, const float*, const float*, const float*,
                         std::size_t, std::span<float>) const {}

namespace layer_util {

void uniform_fan_in(std::span<float> values, std::size_t fan_in, Rng& rng) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(std::max<std::size_t>(fan_in, 1)));
  for (float& v : values) v = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
}

void check_shape(const Shape& s, const char* what) {
  if (s.c < 1 || s.h < 1 || s.w < 1) {
    fail(Code::invalid_argument, std::string(what) + ": the input " + to_string(s) +
                                     " must have every dimension at least 1");
  }
}

int window_count(int size, int kernel, int stride, int padding, const char* what) {
  if (kernel < 1 || stride < 1 || padding < 0) {
    fail(Code::invalid_argument, std::string(what) + ": kernel and stride at least 1, padding "
                                     "at least 0, not " + std::to_string(kernel) + ", " +
                                     std::to_string(stride) + ", " + std::to_string(padding));
  }
  const int span = size + 2 * padding - kernel;
  if (span < 0) {
    fail(Code::invalid_argument, std::string(what) + ": a " + std::to_string(kernel) +
                                     "-wide window does not fit in " + std::to_string(size) +
                                     " with padding " + std::to_string(padding));
  }
  return span / stride + 1;
}

}  // namespace layer_util

namespace {

using layer_util::check_shape;

class Dense final : public Layer {
 public:
  Dense(Shape in, int out) : in_(in), out_(out) {
    check_shape(in, "dense");
    if (out < 1) fail(Code::invalid_argument, "dense: at least one output, not " + std::to_string(out));
  }
  std::string describe() const override { return "dense " + std::to_string(out_); }
  Shape in_shape() const override { return in_; }
  Shape out_shape() const override { return {out_, 1, 1}; }
  std::size_t param_count() const override { return (n_in() + 1) * static_cast<std::size_t>(out_); }
  NormMethod norm_method() const override { return NormMethod::ghost; }
  void init(std::span<float> p, Rng& rng) const override {
    layer_util::uniform_fan_in(p, n_in(), rng);
  }
  void forward(std::span<const float> p, const float* in, float* out,
               std::size_t batch) const override {
    if (batch == 0) return;
    const int n = static_cast<int>(n_in());
    sgemm(false, true, static_cast<int>(batch), out_, n, 1.0f, in, n, p.data(), n, 0.0f, out, out_);
    const float* b = p.data() + n_in() * static_cast<std::size_t>(out_);
    for (std::size_t i = 0; i < batch; ++i) {
      float* row = out + i * static_cast<std::size_t>(out_);
      for (int j = 0; j < out_; ++j) row[j] += b[j];
    }
  }
  void backward(std::span<const float> p, const float*, const float*, const float* grad_out,
                float* grad_in, std::size_t batch) const override {
    if (batch == 0 || !grad_in) return;
    const int n = static_cast<int>(n_in());
    sgemm(false, false, static_cast<int>(batch), n, out_, 1.0f, grad_out, out_, p.data(), n, 0.0f,
          grad_in, n);
  }
  void add_sq_norms(std::span<const float>, const float* in, const float* grad_out,
                    std::size_t batch, float* sq) const override {
    // |g_i a_i^T|^2 + |g_i|^2 = |g_i|^2 (|a_i|^2 + 1), as the MLP's layers (mlp.h).
    std::vector<float> a2(batch), g2(batch);
    kernels::row_sq_norms(in, batch, n_in(), a2.data());
    kernels::row_sq_norms(grad_out, batch, static_cast<std::size_t>(out_), g2.data());
    for (std::size_t i = 0; i < batch; ++i) sq[i] += g2[i] * (a2[i] + 1.0f);
  }
  void add_gradient(std::span<const float>, const float* in, const float* grad_out,
                    const float* scale, std::size_t batch, std::span<float> grad) const override {
    const std::size_t n = n_in(), m = static_cast<std::size_t>(out_);
    std::vector<float> scaled;
    const std::size_t rows = layer_util::scaled_rows(grad_out, m, scale, batch, scaled);
    if (rows == 0) return;
    std::vector<float> kept;
    const float* a = layer_util::kept_rows(in, n, scale, batch, kept);
    // dW (out, in) += G^T A; db += the column sums of G.
    sgemm(true, false, out_, static_cast<int>(n), static_cast<int>(rows), 1.0f, scaled.data(),
          out_, a, static_cast<int>(n), 1.0f, grad.data(), static_cast<int>(n));
    float* db = grad.data() + n * m;
    for (std::size_t i = 0; i < rows; ++i) {
      for (std::size_t j = 0; j < m; ++j) db[j] += scaled[i * m + j];
    }
  }

 private:
  std::size_t n_in() const { return in_.size(); }
  Shape in_;
  int out_;
};

class Elementwise final : public Layer {
 public:
  Elementwise(Shape in, Activation a) : in_(in), a_(a) { check_shape(in, "activation"); }
  std::string describe() const override { return to_string(a_); }
  Shape in_shape() const override { return in_; }
  Shape out_shape() const override { return in_; }
  void forward(std::span<const float>, const float* in, float* out,
               std::size_t batch) const override {
    const std::size_t n = batch * in_.size();
    if (a_ == Activation::tanh) {
      for (std::size_t i = 0; i < n; ++i) out[i] = std::tanh(in[i]);
    } else {
      for (std::size_t i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
    }
  }
  void backward(std::span<const float>, const float* in, const float* out, const float* grad_out,
                float* grad_in, std::size_t batch) const override {
    if (!grad_in) return;
    const std::size_t n = batch * in_.size();
    if (a_ == Activation::tanh) {
      for (std::size_t i = 0; i < n; ++i) grad_in[i] = grad_out[i] * (1.0f - out[i] * out[i]);
    } else {
      for (std::size_t i = 0; i < n; ++i) grad_in[i] = in[i] > 0.0f ? grad_out[i] : 0.0f;
    }
  }

 private:
  Shape in_;
  Activation a_;
};

class Flatten final : public Layer {
 public:
  explicit Flatten(Shape in) : in_(in) { check_shape(in, "flatten"); }
  std::string describe() const override { return "flatten"; }
  Shape in_shape() const override { return in_; }
  Shape out_shape() const override { return {static_cast<int>(in_.size()), 1, 1}; }
  void forward(std::span<const float>, const float* in, float* out,
               std::size_t batch) const override {
    std::copy(in, in + batch * in_.size(), out);
  }
  void backward(std::span<const float>, const float*, const float*, const float* grad_out,
                float* grad_in, std::size_t batch) const override {
    if (grad_in) std::copy(grad_out, grad_out + batch * in_.size(), grad_in);
  }

 private:
  Shape in_;
};

class Pool final : public Layer {
 public:
  Pool(Shape in, int kernel, int stride, bool max)
      : in_(in), kernel_(kernel), stride_(stride), max_(max) {
    const char* what = max ? "max pool" : "average pool";
    check_shape(in, what);
    out_ = {in.c, layer_util::window_count(in.h, kernel, stride, 0, what),
            layer_util::window_count(in.w, kernel, stride, 0, what)};
  }
  std::string describe() const override {
    return std::string(max_ ? "max pool " : "average pool ") + std::to_string(kernel_) +
           " stride " + std::to_string(stride_);
  }
  Shape in_shape() const override { return in_; }
  Shape out_shape() const override { return out_; }
  void forward(std::span<const float>, const float* in, float* out,
               std::size_t batch) const override {
    const float area = static_cast<float>(kernel_ * kernel_);
    for_each_window(batch, [&](std::size_t o, const float* x, std::size_t first) {
      if (max_) {
        out[o] = x[first + best(x + first)];
      } else {
        float s = 0;
        for (int u = 0; u < kernel_; ++u) {
          for (int v = 0; v < kernel_; ++v) s += x[first + static_cast<std::size_t>(u * in_.w + v)];
        }
        out[o] = s / area;
      }
    }, in);
  }
  void backward(std::span<const float>, const float* in, const float*, const float* grad_out,
                float* grad_in, std::size_t batch) const override {
    if (!grad_in) return;
    std::fill(grad_in, grad_in + batch * in_.size(), 0.0f);
    const float area = static_cast<float>(kernel_ * kernel_);
    for_each_window(batch, [&](std::size_t o, const float* x, std::size_t first) {
      float* g = grad_in + (x - in);
      if (max_) {
        g[first + best(x + first)] += grad_out[o];
        return;
      }
      for (int u = 0; u < kernel_; ++u) {
        for (int v = 0; v < kernel_; ++v) {
          g[first + static_cast<std::size_t>(u * in_.w + v)] += grad_out[o] / area;
        }
      }
    }, in);
  }

 private:
  // The offset, from a window's first element, of its first largest (0 when all are NaN).
  std::size_t best(const float* x) const {
    std::size_t at = 0;
    float top = x[0];
    for (int u = 0; u < kernel_; ++u) {
      for (int v = 0; v < kernel_; ++v) {
        const std::size_t k = static_cast<std::size_t>(u * in_.w + v);
        if (x[k] > top || (std::isnan(top) && !std::isnan(x[k]))) {
          top = x[k];
          at = k;
        }
      }
    }
    return at;
  }
  // f(output index, the example's input, the window's first element's offset in it).
  template <class F> void for_each_window(std::size_t batch, F f, const float* in) const {
    std::size_t o = 0;
    for (std::size_t i = 0; i < batch; ++i) {
      const float* x = in + i * in_.size();
      for (int c = 0; c < out_.c; ++c) {
        for (int y = 0; y < out_.h; ++y) {
          for (int z = 0; z < out_.w; ++z) {
            const std::size_t first = (static_cast<std::size_t>(c) * in_.h + y * stride_) * in_.w +
                                      static_cast<std::size_t>(z * stride_);
            f(o++, x, first);
          }
        }
      }
    }
  }
  Shape in_, out_;
  int kernel_, stride_;
  bool max_;
};

}  // namespace

std::unique_ptr<Layer> dense(Shape in, int out) { return std::make_unique<Dense>(in, out); }
std::unique_ptr<Layer> max_pool(Shape in, int kernel, int stride) {
  return std::make_unique<Pool>(in, kernel, stride, true);
}
std::unique_ptr<Layer> avg_pool(Shape in, int kernel, int stride) {
  return std::make_unique<Pool>(in, kernel, stride, false);
}
std::unique_ptr<Layer> activation(Shape in, Activation a) {
  return std::make_unique<Elementwise>(in, a);
}
std::unique_ptr<Layer> flatten(Shape in) { return std::make_unique<Flatten>(in); }

}  // namespace dpg::model
