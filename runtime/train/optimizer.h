// SGD with momentum and optional weight decay (PyTorch's torch.optim.SGD update rule), and an
// exponential moving average of the parameters. Both only read privatised gradients.
#pragma once

#include <span>
#include <vector>

#include "dp/mechanism.h"
#include "runtime/core/train_config.h"

namespace dpg::train {

struct SgdOptions {
  double lr = 0.1;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class Sgd {
 public:
  Sgd(std::size_t num_params, SgdOptions options);
  void set_lr(double lr) { options_.lr = lr; }
  const SgdOptions& options() const { return options_; }
  // params -= lr * (momentum buffer of g + weight_decay * params)
  void apply(std::span<float> params, const dp::PrivateGradient& gradient);
  std::span<const float> momentum_buffer() const { return velocity_; }
  // Whether a step was taken (the first one sets the momentum buffer to the gradient).
  bool started() const { return !first_; }
  // Restores the state of a checkpoint: the buffer (momentum_buffer()'s size) and started().
  void restore(std::span<const float> velocity, bool started);

 private:
  SgdOptions options_;
  std::vector<float> velocity_;
  bool first_ = true;
};

// The learning rate of step t of `steps` under config.lr_schedule (constant or cosine).
double scheduled_lr(const TrainConfig& config, long long t, long long steps);

// ema <- decay * ema + (1 - decay) * params; the averaged model is a post-processing of
// privatised updates, so evaluating it costs no privacy.
class ParamAverage {
 public:
  ParamAverage(std::span<const float> params, double decay);
  void update(std::span<const float> params);
  std::span<const float> values() const { return ema_; }
  std::span<float> values() { return ema_; }  // to restore a checkpoint's
  double decay() const { return decay_; }

 private:
  std::vector<float> ema_;
  double decay_;
};

}  // namespace dpg::train
