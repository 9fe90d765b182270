#include "runtime/train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "dp/accountant.h"
#include "dp/mechanism.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/model/blas_threads.h"
#include "runtime/model/mlp.h"
#include "runtime/train/gradient.h"
#include "runtime/train/optimizer.h"
#include "runtime/train/sampler.h"

namespace dpg::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Null for an infinite epsilon (DP off), since JSON has no infinity.
Json epsilon_json(double eps) { return std::isfinite(eps) ? Json(eps) : Json(nullptr); }

model::MlpSpec spec_for(const TrainConfig& c, const data::Dataset& d) {
  model::MlpSpec s;
  s.inputs = static_cast<int>(d.cols);
  s.hidden = c.hidden;
  s.classes = d.num_classes;
  s.activation = model::parse_activation(c.activation);
  return s;
}

}  // namespace

Json EpochReport::to_json() const {
  return {{"epoch", epoch},
          {"step", step},
          {"wall_s", wall_s},
          {"loss", loss},
          {"train_accuracy", train_accuracy},
          {"test_accuracy", test_accuracy},
          {"test_loss", test_loss},
          {"epsilon", epsilon_json(epsilon)},
          {"samples_per_second", samples_per_second},
          {"lr", lr}};
}

Json TrainSummary::to_json(const TrainConfig& c) const {
  Json j = {{"test_accuracy", test_accuracy},
            {"test_accuracy_last_iterate", test_accuracy_last_iterate},
            {"epsilon", epsilon_json(epsilon)},
            {"best_alpha", std::isfinite(best_alpha) ? Json(best_alpha) : Json(nullptr)},
            {"delta", c.delta},
            {"dp", c.dp},
            {"noise_multiplier", noise_multiplier},
            {"clip_norm", c.clip_norm},
            {"sample_rate", sample_rate},
            {"sampling", c.sampling},
            {"epochs", c.epochs},
            {"steps", steps},
            {"samples_per_second", samples_per_second},
            {"wall_s", wall_s},
            {"dropped_examples", dropped_examples},
            {"accountant", accountant},
            {"config", dpg::to_json(c)}};
  if (c.dp && c.sampling != "poisson") {
    j["epsilon_note"] = "epsilon assumes Poisson sampling; this run used fixed-size shuffled batches";
  }
  return j;
}

Trainer::Trainer(TrainConfig config, data::Prepared data)
    : config_(std::move(config)), data_(std::move(data)) {
  validate(config_);
  const auto n = static_cast<double>(data_.train.rows);
  if (data_.train.rows == 0) fail(Code::invalid_argument, "train: the training shard is empty");
  if (config_.batch_size > n) {
    fail(Code::invalid_argument, "batch_size: " + std::to_string(config_.batch_size) +
                                     " exceeds the shard's " + std::to_string(data_.train.rows) +
                                     " examples");
  }
  q_ = config_.batch_size / n;
  total_steps_ = dp::steps_for_epochs(config_.epochs, q_);
  if (config_.dp) {
    sigma_ = config_.noise_multiplier > 0
                 ? config_.noise_multiplier
                 : dp::calibrate_noise_multiplier(q_, total_steps_, config_.delta,
                                                  config_.target_epsilon);
  }
}

TrainSummary Trainer::run(const std::function<void(const EpochReport&)>& on_epoch) {
  const TrainConfig& c = config_;
  model::set_blas_threads(c.threads);
  const model::MlpSpec spec = spec_for(c, data_.train);
  model::Mlp model(spec, c.seed);
  model::Mlp released(spec, c.seed);  // what is evaluated: the iterate or its average
  model::Workspace ws, eval_ws;
  const std::size_t cols = data_.train.cols;

  dp::MechanismOptions mo{.enabled = c.dp,
                          .clip_norm = static_cast<float>(c.clip_norm),
                          .noise_multiplier = sigma_,
                          .expected_batch = c.batch_size};
  dp::GaussianMechanism mechanism(model.num_params(), mo, c.seed, 0);
  Sgd sgd(model.num_params(), {.lr = c.lr, .momentum = c.momentum, .weight_decay = c.weight_decay});
  std::optional<ParamAverage> ema;
  if (c.ema_decay > 0) ema.emplace(model.params(), c.ema_decay);
  dp::RdpAccountant accountant;

  Rng sampler_rng(c.seed, stream_for(stream::kSampler, 0));
  std::optional<PoissonSampler> poisson;
  std::optional<ShuffleSampler> shuffle;
  if (c.sampling == "poisson") {
    poisson.emplace(data_.train.rows, q_, sampler_rng);
  } else {
    shuffle.emplace(data_.train.rows, static_cast<std::size_t>(std::llround(c.batch_size)),
                    sampler_rng);
  }

  DPG_INFO("train: " << data_.train.rows << " examples, q = " << q_ << ", " << total_steps_
                     << " steps, " << (c.dp ? "DP-SGD" : "plain SGD") << ", noise multiplier "
                     << sigma_ << ", clip " << c.clip_norm << ", config " << dpg::to_json(c).dump());
  if (c.dp && c.sampling != "poisson") {
    DPG_WARN("train: sampling is 'shuffle'; the reported epsilon assumes Poisson sampling");
  }

  TrainSummary summary;
  summary.sample_rate = q_;
  summary.noise_multiplier = sigma_;
  summary.steps = total_steps_;
  const int epochs = static_cast<int>(std::ceil(c.epochs - 1e-9));
  std::vector<std::int32_t> labels;
  const auto start = Clock::now();
  double train_seconds = 0;
  long long samples = 0;
  long long step = 0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    const long long end = std::min<long long>(
        total_steps_, static_cast<long long>(std::ceil(epoch / q_ - 1e-9)));
    const auto epoch_start = Clock::now();
    double loss_sum = 0;
    long long seen = 0, correct = 0;
    double lr = c.lr;
    for (; step < end; ++step) {
      const auto& batch = poisson ? poisson->next() : shuffle->next();
      ws.resize(spec, batch.size());
      labels.resize(batch.size());
      float* x = ws.act[0].data();
      for (std::size_t i = 0; i < batch.size(); ++i) {
        std::copy_n(data_.train.features.data() + batch[i] * cols, cols, x + i * cols);
        labels[i] = data_.train.labels[batch[i]];
      }
      StepStats stats;
      const dp::PrivateGradient g = private_gradient(model, ws, labels, mechanism, stats);
      if (c.lr_schedule == "cosine") {
        lr = c.lr * 0.5 * (1.0 + std::cos(M_PI * static_cast<double>(step) / total_steps_));
      }
      sgd.set_lr(lr);
      sgd.apply(model.params(), g);
      if (ema) ema->update(model.params());
      if (c.dp) accountant.step(q_, sigma_);
      loss_sum += stats.loss_sum;
      correct += static_cast<long long>(stats.correct);
      seen += static_cast<long long>(stats.batch);
      summary.dropped_examples += static_cast<long long>(stats.dropped);
    }
    train_seconds += seconds_since(epoch_start);
    samples += seen;

    const auto params = ema ? ema->values() : std::span<const float>(model.params());
    std::copy(params.begin(), params.end(), released.params().begin());
    const auto ev = released.evaluate(data_.test.features, data_.test.labels, eval_ws);
    EpochReport r;
    r.epoch = epoch;
    r.step = step;
    r.wall_s = seconds_since(start);
    r.loss = seen > 0 ? loss_sum / seen : 0.0;
    r.train_accuracy = seen > 0 ? static_cast<double>(correct) / seen : 0.0;
    r.test_accuracy = ev.rows > 0 ? static_cast<double>(ev.correct) / ev.rows : 0.0;
    r.test_loss = ev.rows > 0 ? ev.loss_sum / ev.rows : 0.0;
    r.epsilon = c.dp ? accountant.spent(c.delta).epsilon : std::numeric_limits<double>::infinity();
    r.samples_per_second = train_seconds > 0 ? samples / train_seconds : 0.0;
    r.lr = lr;
    on_epoch(r);
    summary.test_accuracy = r.test_accuracy;
  }
  const auto last = model.evaluate(data_.test.features, data_.test.labels, eval_ws);
  summary.test_accuracy_last_iterate =
      last.rows > 0 ? static_cast<double>(last.correct) / last.rows : 0.0;
  const auto spent = c.dp ? accountant.spent(c.delta)
                          : dp::PrivacySpent{std::numeric_limits<double>::infinity(),
                                             std::numeric_limits<double>::quiet_NaN()};
  summary.epsilon = spent.epsilon;
  summary.best_alpha = spent.best_alpha;
  summary.samples_per_second = train_seconds > 0 ? samples / train_seconds : 0.0;
  summary.wall_s = seconds_since(start);
  summary.accountant = accountant.to_json();
  return summary;
}

std::string progress_line(const EpochReport& r, int total_epochs) {
  char buf[256];
  const std::string eps = std::isfinite(r.epsilon) ? std::to_string(r.epsilon).substr(0, 6) : "inf";
  std::snprintf(buf, sizeof buf,
                "epoch %3d/%d  loss %.4f  train acc %.2f%%  test acc %.2f%%  eps %s  %.0f samples/s",
                r.epoch, total_epochs, r.loss, 100 * r.train_accuracy, 100 * r.test_accuracy,
                eps.c_str(), r.samples_per_second);
  return buf;
}

}  // namespace dpg::train
