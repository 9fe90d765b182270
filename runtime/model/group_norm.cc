// Group norm (runtime/model/layers.h; Wu and He 2018): per example, each group of channels is
// normalised over its channels and positions, xhat = (x - mean) / sqrt(var + eps) with the
// biased variance, as PyTorch's GroupNorm; with `affine`, y = gamma_c xhat + beta_c, the
// parameters gamma (C) then beta (C). An example's statistics are its own, so its output does
// not depend on the rest of the batch (as DP-SGD's per-example clipping needs; batch norm would
// mix the examples).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/model/layer_util.h"
#include "runtime/model/layers.h"

namespace dpg::model {
namespace {

constexpr double kEps = 1e-5;

class GroupNorm final : public Layer {
 public:
  GroupNorm(Shape in, int groups, bool affine) : in_(in), groups_(groups), affine_(affine) {
    layer_util::check_shape(in, "group norm");
    if (groups < 1 || in.c % groups != 0) {
      fail(Code::invalid_argument, "group norm: " + std::to_string(groups) +
                                       " groups must divide the " + std::to_string(in.c) +
                                       " channels");
    }
  }
  std::string describe() const override {
    return "group norm " + std::to_string(groups_) + (affine_ ? "" : " (no scale)");
  }
  Shape in_shape() const override { return in_; }
  Shape out_shape() const override { return in_; }
  std::size_t param_count() const override {
    return affine_ ? 2 * static_cast<std::size_t>(in_.c) : 0;
  }
  NormMethod norm_method() const override {
    return affine_ ? NormMethod::materialised : NormMethod::none;
  }
  void init(std::span<float> p, Rng&) const override {
    if (!affine_) return;
    std::fill(p.begin(), p.begin() + in_.c, 1.0f);
    std::fill(p.begin() + in_.c, p.end(), 0.0f);
  }

  void forward(std::span<const float> p, const float* in, float* out,
               std::size_t batch) const override {
    for (std::size_t i = 0; i < batch; ++i) {
      each_group(in + i * in_.size(), [&](std::size_t first, std::size_t n, double mean, double inv) {
        for (std::size_t j = first; j < first + n; ++j) {
          const float xhat = static_cast<float>((in[i * in_.size() + j] - mean) * inv);
          const std::size_t c = j / plane();
          out[i * in_.size() + j] = affine_ ? p[c] * xhat + p[static_cast<std::size_t>(in_.c) + c]
                                            : xhat;
        }
      });
    }
  }

  void backward(std::span<const float> p, const float* in, const float*, const float* grad_out,
                float* grad_in, std::size_t batch) const override {
    if (!grad_in) return;
    for (std::size_t i = 0; i < batch; ++i) {
      const float* x = in + i * in_.size();
      const float* dy = grad_out + i * in_.size();
      float* dx = grad_in + i * in_.size();
      each_group(x, [&](std::size_t first, std::size_t n, double mean, double inv) {
        // dx = inv / n (n dxhat - sum dxhat - xhat sum(dxhat xhat)), dxhat = dy gamma.
        double sum = 0, dot = 0;
        for (std::size_t j = first; j < first + n; ++j) {
          const double d = dy[j] * (affine_ ? p[j / plane()] : 1.0f);
          sum += d;
          dot += d * (x[j] - mean) * inv;
        }
        const double count = static_cast<double>(n);
        for (std::size_t j = first; j < first + n; ++j) {
          const double d = dy[j] * (affine_ ? p[j / plane()] : 1.0f);
          const double xhat = (x[j] - mean) * inv;
          dx[j] = static_cast<float>(inv / count * (count * d - sum - xhat * dot));
        }
      });
    }
  }

  void add_sq_norms(std::span<const float>, const float* in, const float* grad_out,
                    std::size_t batch, float* sq) const override {
    if (!affine_) return;
    std::vector<double> g(param_count());
    for (std::size_t i = 0; i < batch; ++i) {
      example_gradient(in + i * in_.size(), grad_out + i * in_.size(), g);
      double s = 0;
      for (double v : g) s += v * v;
      sq[i] += static_cast<float>(s);
    }
  }

  void add_gradient(std::span<const float>, const float* in, const float* grad_out,
                    const float* scale, std::size_t batch, std::span<float> grad) const override {
    if (!affine_) return;
    std::vector<double> g(param_count());
    for (std::size_t i = 0; i < batch; ++i) {
      const float s = scale ? scale[i] : 1.0f;
      if (s == 0.0f) continue;
      example_gradient(in + i * in_.size(), grad_out + i * in_.size(), g);
      for (std::size_t j = 0; j < g.size(); ++j) grad[j] += static_cast<float>(g[j] * s);
    }
  }

 private:
  std::size_t plane() const { return static_cast<std::size_t>(in_.h) * static_cast<std::size_t>(in_.w); }
  // f(first element, count, mean, 1 / sqrt(var + eps)) for each group of one example.
  template <class F> void each_group(const float* x, F f) const {
    const std::size_t n = in_.size() / static_cast<std::size_t>(groups_);
    for (int g = 0; g < groups_; ++g) {
      const std::size_t first = static_cast<std::size_t>(g) * n;
      double mean = 0;
      for (std::size_t j = first; j < first + n; ++j) mean += x[j];
      mean /= static_cast<double>(n);
      double var = 0;
      for (std::size_t j = first; j < first + n; ++j) var += (x[j] - mean) * (x[j] - mean);
      var /= static_cast<double>(n);
      f(first, n, mean, 1.0 / std::sqrt(var + kEps));
    }
  }
  // One example's gradient of gamma (sum over positions of dy xhat) and beta (of dy).
  void example_gradient(const float* x, const float* dy, std::vector<double>& g) const {
    std::fill(g.begin(), g.end(), 0.0);
    const std::size_t c = static_cast<std::size_t>(in_.c);
    each_group(x, [&](std::size_t first, std::size_t n, double mean, double inv) {
      for (std::size_t j = first; j < first + n; ++j) {
        g[j / plane()] += dy[j] * (x[j] - mean) * inv;
        g[c + j / plane()] += dy[j];
      }
    });
  }

  Shape in_;
  int groups_;
  bool affine_;
};

}  // namespace

std::unique_ptr<Layer> group_norm(Shape in, int groups, bool affine) {
  return std::make_unique<GroupNorm>(in, groups, affine);
}

}  // namespace dpg::model
