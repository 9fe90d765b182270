#include "runtime/train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/check.h"

namespace dpg::train {

Sgd::Sgd(std::size_t num_params, SgdOptions options)
    : options_(options), velocity_(options.momentum > 0.0 ? num_params : 0, 0.0f) {}

void Sgd::apply(std::span<float> params, const dp::PrivateGradient& gradient) {
  const std::span<const float> g = gradient.values();
  DPG_CHECK_EQ(g.size(), params.size());
  const auto lr = static_cast<float>(options_.lr);
  const auto wd = static_cast<float>(options_.weight_decay);
  const auto mu = static_cast<float>(options_.momentum);
  const std::size_t n = params.size();
  if (mu == 0.0f) {
    for (std::size_t i = 0; i < n; ++i) params[i] -= lr * (g[i] + wd * params[i]);
    return;
  }
  // PyTorch: the first step sets the buffer to the gradient (no dampening).
  const float keep = first_ ? 0.0f : mu;
  first_ = false;
  for (std::size_t i = 0; i < n; ++i) {
    const float d = g[i] + wd * params[i];
    velocity_[i] = keep * velocity_[i] + d;
    params[i] -= lr * (options_.nesterov ? d + mu * velocity_[i] : velocity_[i]);
  }
}

void Sgd::restore(std::span<const float> velocity, bool started) {
  DPG_CHECK_EQ(velocity.size(), velocity_.size());
  std::copy(velocity.begin(), velocity.end(), velocity_.begin());
  first_ = !started;
}

double scheduled_lr(const TrainConfig& c, long long t, long long steps) {
  if (c.lr_schedule != LrSchedule::cosine) return c.lr;
  return c.lr * 0.5 * (1.0 + std::cos(M_PI * static_cast<double>(t) / static_cast<double>(steps)));
}

ParamAverage::ParamAverage(std::span<const float> params, double decay)
    : ema_(params.begin(), params.end()), decay_(decay) {}

void ParamAverage::update(std::span<const float> params) {
  DPG_CHECK_EQ(params.size(), ema_.size());
  const auto d = static_cast<float>(decay_);
  for (std::size_t i = 0; i < ema_.size(); ++i) ema_[i] = d * ema_[i] + (1.0f - d) * params[i];
}

}  // namespace dpg::train
