// The 2-D convolution (runtime/model/layers.h): im2col and GEMM, per example. The patches of
// example i are A_i (T x P): for each of its T = out_h * out_w output positions, the P = c * k * k
// input values its window covers (zero past the padded edge). Its output is W A_i^T (O x T), the
// channel-major layout of the next layer's input; its weight gradient is G_i A_i (O x P) for
// its output gradient G_i (O x T), and its bias gradient G_i's row sums.
#include <algorithm>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/model/gemm.h"
#include "runtime/model/layer_util.h"
#include "runtime/model/layers.h"

namespace dpg::model {
namespace {

class Conv2d final : public Layer {
 public:
  Conv2d(Shape in, int out_channels, int kernel, int stride, int padding, NormMethod norms)
      : in_(in), o_(out_channels), k_(kernel), stride_(stride), pad_(padding) {
    layer_util::check_shape(in, "conv");
    if (out_channels < 1) {
      fail(Code::invalid_argument,
           "conv: at least one output channel, not " + std::to_string(out_channels));
    }
    out_ = {o_, layer_util::window_count(in.h, k_, stride_, pad_, "conv"),
            layer_util::window_count(in.w, k_, stride_, pad_, "conv")};
    t_ = static_cast<std::size_t>(out_.h) * static_cast<std::size_t>(out_.w);
    p_ = static_cast<std::size_t>(in.c) * static_cast<std::size_t>(k_ * k_);
    // Ghost where its T x T products cost no more than the weights' count (Bu et al. 2022).
    const double ghost = 2.0 * static_cast<double>(t_) * static_cast<double>(t_);
    method_ = norms != NormMethod::none ? norms
              : ghost <= static_cast<double>(o_) * static_cast<double>(p_) ? NormMethod::ghost
                                                                           : NormMethod::materialised;
  }
  std::string describe() const override {
    return "conv " + std::to_string(o_) + " " + std::to_string(k_) + "x" + std::to_string(k_) +
           " stride " + std::to_string(stride_) + " pad " + std::to_string(pad_);
  }
  Shape in_shape() const override { return in_; }
  Shape out_shape() const override { return out_; }
  std::size_t param_count() const override { return static_cast<std::size_t>(o_) * (p_ + 1); }
  NormMethod norm_method() const override { return method_; }
  void init(std::span<float> p, Rng& rng) const override { layer_util::uniform_fan_in(p, p_, rng); }

  void forward(std::span<const float> p, const float* in, float* out,
               std::size_t batch) const override {
    std::vector<float> a(t_ * p_);
    const float* bias = p.data() + static_cast<std::size_t>(o_) * p_;
    for (std::size_t i = 0; i < batch; ++i) {
      im2col(in + i * in_.size(), a.data());
      float* y = out + i * out_.size();
      // Y (O x T) = W (O x P) A^T.
      sgemm(false, true, o_, static_cast<int>(t_), static_cast<int>(p_), 1.0f, p.data(),
            static_cast<int>(p_), a.data(), static_cast<int>(p_), 0.0f, y, static_cast<int>(t_));
      for (int c = 0; c < o_; ++c) {
        for (std::size_t t = 0; t < t_; ++t) y[static_cast<std::size_t>(c) * t_ + t] += bias[c];
      }
    }
  }

  void backward(std::span<const float> p, const float*, const float*, const float* grad_out,
                float* grad_in, std::size_t batch) const override {
    if (!grad_in) return;
    std::vector<float> da(t_ * p_);
    for (std::size_t i = 0; i < batch; ++i) {
      // dA (T x P) = G^T W, then each patch's values back where they were read.
      sgemm(true, false, static_cast<int>(t_), static_cast<int>(p_), o_, 1.0f,
            grad_out + i * out_.size(), static_cast<int>(t_), p.data(), static_cast<int>(p_), 0.0f,
            da.data(), static_cast<int>(p_));
      col2im(da.data(), grad_in + i * in_.size());
    }
  }

  void add_sq_norms(std::span<const float>, const float* in, const float* grad_out,
                    std::size_t batch, float* sq) const override {
    std::vector<float> a(t_ * p_), gram_a, gram_g, dw;
    if (method_ == NormMethod::ghost) {
      gram_a.resize(t_ * t_);
      gram_g.resize(t_ * t_);
    } else {
      dw.resize(static_cast<std::size_t>(o_) * p_);
    }
    const int t = static_cast<int>(t_), pp = static_cast<int>(p_);
    for (std::size_t i = 0; i < batch; ++i) {
      im2col(in + i * in_.size(), a.data());
      const float* g = grad_out + i * out_.size();
      double w = 0;
      if (method_ == NormMethod::ghost) {
        // <A A^T, G^T G> over T x T.
        sgemm(false, true, t, t, pp, 1.0f, a.data(), pp, a.data(), pp, 0.0f, gram_a.data(), t);
        sgemm(true, false, t, t, o_, 1.0f, g, t, g, t, 0.0f, gram_g.data(), t);
        for (std::size_t j = 0; j < t_ * t_; ++j) {
          w += static_cast<double>(gram_a[j]) * gram_g[j];
        }
      } else {
        sgemm(false, false, o_, pp, t, 1.0f, g, t, a.data(), pp, 0.0f, dw.data(), pp);
        for (float v : dw) w += static_cast<double>(v) * v;
      }
      double b = 0;
      for (int c = 0; c < o_; ++c) {
        double s = 0;
        for (std::size_t u = 0; u < t_; ++u) s += g[static_cast<std::size_t>(c) * t_ + u];
        b += s * s;
      }
      sq[i] += static_cast<float>(w + b);
    }
  }

  void add_gradient(std::span<const float>, const float* in, const float* grad_out,
                    const float* scale, std::size_t batch, std::span<float> grad) const override {
    std::vector<float> a(t_ * p_), g(out_.size());
    float* bias = grad.data() + static_cast<std::size_t>(o_) * p_;
    const int t = static_cast<int>(t_), pp = static_cast<int>(p_);
    for (std::size_t i = 0; i < batch; ++i) {
      const float s = scale ? scale[i] : 1.0f;
      if (s == 0.0f) continue;
      im2col(in + i * in_.size(), a.data());
      const float* gi = grad_out + i * out_.size();
      for (std::size_t j = 0; j < out_.size(); ++j) g[j] = gi[j] * s;
      // dW (O x P) += G A.
      sgemm(false, false, o_, pp, t, 1.0f, g.data(), t, a.data(), pp, 1.0f, grad.data(), pp);
      for (int c = 0; c < o_; ++c) {
        float sum = 0;
        for (std::size_t u = 0; u < t_; ++u) sum += g[static_cast<std::size_t>(c) * t_ + u];
        bias[c] += sum;
      }
    }
  }

 private:
  // f(position t, patch index q, input offset or -1 past the edge) for every patch entry.
  template <class F> void for_each_patch(F f) const {
    for (int y = 0; y < out_.h; ++y) {
      for (int x = 0; x < out_.w; ++x) {
        const std::size_t t = static_cast<std::size_t>(y * out_.w + x);
        std::size_t q = 0;
        for (int c = 0; c < in_.c; ++c) {
          for (int u = 0; u < k_; ++u) {
            const int row = y * stride_ - pad_ + u;
            for (int v = 0; v < k_; ++v, ++q) {
              const int col = x * stride_ - pad_ + v;
              const bool inside = row >= 0 && row < in_.h && col >= 0 && col < in_.w;
              f(t, q, inside ? (static_cast<long>(c) * in_.h + row) * in_.w + col : -1L);
            }
          }
        }
      }
    }
  }
  void im2col(const float* x, float* a) const {
    for_each_patch([&](std::size_t t, std::size_t q, long at) {
      a[t * p_ + q] = at < 0 ? 0.0f : x[at];
    });
  }
  void col2im(const float* da, float* dx) const {
    std::fill(dx, dx + in_.size(), 0.0f);
    for_each_patch([&](std::size_t t, std::size_t q, long at) {
      if (at >= 0) dx[at] += da[t * p_ + q];
    });
  }

  Shape in_, out_;
  int o_, k_, stride_, pad_;
  std::size_t t_ = 0, p_ = 0;
  NormMethod method_ = NormMethod::materialised;
};

}  // namespace

std::unique_ptr<Layer> conv2d(Shape in, int out_channels, int kernel, int stride, int padding,
                              NormMethod norms) {
  return std::make_unique<Conv2d>(in, out_channels, kernel, stride, padding, norms);
}

}  // namespace dpg::model
