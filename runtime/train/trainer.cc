#include "runtime/train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <limits>
#include <optional>
#include <random>

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
  s.activation = c.activation;
  return s;
}

}  // namespace

Json EpochReport::to_json() const {
  Json j = {{"epoch", epoch},
          {"step", step},
          {"wall_s", wall_s},
          {"loss", loss},
          {"train_accuracy", train_accuracy},
          {"test_accuracy", test_accuracy},
          {"test_loss", test_loss},
          {"epsilon", epsilon_json(epsilon)},
          {"samples_per_second", samples_per_second},
          {"lr", lr}};
  if (!topology.empty()) {
    j["topology"] = topology;
    j["rho"] = rho;
    j["consensus_distance"] = consensus_distance;
    j["peer_test_accuracy"] = peer_test_accuracy;
    j["peer_test_loss"] = peer_test_loss;
  }
  return j;
}

Json ConsensusReport::to_json() const {
  Json j = {{"step", round},   {"round", round},
            {"epoch", epoch},  {"wall_s", wall_s},
            {"consensus_distance", consensus_distance},
            {"topology", topology}, {"rho", rho}};
  if (eval_rows > 0) {
    j["eval_rows"] = eval_rows;
    j["test_accuracy"] = test_accuracy;
    j["test_loss"] = test_loss;
    j["peer_test_accuracy"] = peer_test_accuracy;
    j["peer_test_loss"] = peer_test_loss;
  }
  return j;
}

Json TrainSummary::to_json(const TrainConfig& c) const {
  Json j = {{"test_accuracy", test_accuracy},
            {"test_accuracy_last_iterate", test_accuracy_last_iterate},
            {"epsilon", epsilon_json(epsilon)},
            {"message_epsilon", epsilon_json(message_epsilon)},
            {"peers", peers},
            {"algo", to_string(c.algo)},
            {"noise_mode",
             c.algo == Algo::gossip ? std::string("local") : to_string(c.noise_mode)},
            {"peer_noise_multiplier", peer_noise_multiplier},
            {"best_alpha", std::isfinite(best_alpha) ? Json(best_alpha) : Json(nullptr)},
            {"delta", c.delta},
            {"dp", c.dp},
            {"noise_multiplier", noise_multiplier},
            {"clip_norm", c.clip_norm},
            {"sample_rate", sample_rate},
            {"sampling", to_string(c.sampling)},
            {"epochs", c.epochs},
            {"steps", steps},
            {"samples_per_second", samples_per_second},
            {"wall_s", wall_s},
            {"dropped_examples", dropped_examples},
            {"topology", topology},
            {"rho", rho},
            {"spectral_gap", spectral_gap},
            {"accountant", accountant},
            {"config", dpg::to_json(c)}};
  if (!peer_epsilons.empty()) {
    j["peer_epsilons"] = peer_epsilons;
    j["peer_test_accuracy"] = peer_test_accuracy;
  }
  if (c.dp && c.sampling != Sampling::poisson) {
    j["epsilon_note"] = "epsilon assumes Poisson sampling; this run used fixed-size shuffled batches";
  }
  return j;
}

Trainer::Trainer(TrainConfig config, data::Prepared data, collective::Communicator* comm,
                 std::vector<GossipPhase> gossip)
    : config_(std::move(config)),
      data_(std::move(data)),
      comm_(comm),
      gossip_phases_(std::move(gossip)) {
  validate(config_);
  if (data_.train.rows == 0) {
    fail(Code::invalid_argument,
         "train: rank " + std::to_string(rank()) + "'s training shard is empty");
  }
  // Every peer's shard size (public: the manifest has them), for the sampling rates.
  std::vector<double> rows(static_cast<std::size_t>(world()), 0.0);
  rows[static_cast<std::size_t>(rank())] = static_cast<double>(data_.train.rows);
  sum_over_peers(rows);
  for (double r : rows) total_rows_ += r;
  if (config_.batch_size > total_rows_) {
    fail(Code::invalid_argument, "batch_size: " + std::to_string(config_.batch_size) +
                                     " exceeds the " + std::to_string(total_rows_) +
                                     " training examples");
  }
  // The expected batch over all peers is batch_size, so an epoch is 1/q steps as in one process.
  q_ = config_.batch_size / total_rows_;
  total_steps_ = dp::steps_for_epochs(config_.epochs, q_);
  if (gossiping()) {
    // Each peer takes its own step on batch_size / N expected examples of its own shard, so it
    // samples at its own rate; the noise is calibrated for the highest.
    local_batch_ = config_.batch_size / world();
    for (std::size_t j = 0; j < rows.size(); ++j) {
      if (local_batch_ > rows[j]) {
        fail(Code::invalid_argument,
             "batch_size: each peer's share, " + std::to_string(local_batch_) +
                 ", exceeds peer " + std::to_string(j) + "'s " + std::to_string(rows[j]) +
                 " examples");
      }
      peer_q_.push_back(local_batch_ / rows[j]);
    }
    q_local_ = peer_q_[static_cast<std::size_t>(rank())];
  } else {
    local_batch_ = config_.batch_size;
    q_local_ = q_;
    peer_q_.assign(1, q_);
  }
  if (config_.dp) {
    const double q_worst = *std::max_element(peer_q_.begin(), peer_q_.end());
    sigma_ = config_.noise_multiplier > 0
                 ? config_.noise_multiplier
                 : dp::calibrate_noise_multiplier(q_worst, total_steps_, config_.delta,
                                                  config_.target_epsilon);
    // sigma_ is the noise of the guarantee the mode is named for: the sum's in distributed
    // mode, each message's in local mode and in gossip (where each peer's model is all it sends).
    const double root_n = std::sqrt(static_cast<double>(world()));
    const bool local = config_.noise_mode == NoiseMode::local || gossiping();
    peer_sigma_ = local ? sigma_ : sigma_ / root_n;
    model_sigma_ = local && !gossiping() ? sigma_ * root_n : sigma_;
  }
}

void Trainer::sum_over_peers(std::span<double> values) const {
  if (comm_) comm_->allreduce(values, collective::Reduce::sum);
}

// Each peer evaluates its slice of the test split; the counts are summed over the peers.
model::Mlp::Evaluation Trainer::evaluate_shared(const model::Mlp& m, model::Workspace& ws,
                                                std::size_t limit) const {
  const std::size_t rows = std::min(limit, data_.test.rows), cols = data_.test.cols;
  const std::size_t n = static_cast<std::size_t>(world()), r = static_cast<std::size_t>(rank());
  const std::size_t begin = rows * r / n, end = rows * (r + 1) / n;
  const auto ev = m.evaluate(
      std::span<const float>(data_.test.features).subspan(begin * cols, (end - begin) * cols),
      std::span<const std::int32_t>(data_.test.labels).subspan(begin, end - begin), ws);
  double sums[3] = {ev.loss_sum, static_cast<double>(ev.correct), static_cast<double>(ev.rows)};
  sum_over_peers(sums);
  return {sums[0], static_cast<std::size_t>(sums[1]), static_cast<std::size_t>(sums[2])};
}

struct RunState {
  RunState(const TrainConfig& c, const data::Dataset& train, double q, double expected_batch,
           double peer_sigma, int rank)
      : spec(spec_for(c, train)),
        model(spec, c.init == Init::independent ? c.seed + static_cast<std::uint64_t>(rank) : c.seed),
        released(spec, c.seed),
        noise_seed(c.noise_seed != 0 ? c.noise_seed : secret_seed()),
        mechanism(model.num_params(),
                  {.enabled = c.dp,
                   .clip_norm = static_cast<float>(c.clip_norm),
                   .noise_multiplier = peer_sigma,
                   .expected_batch = expected_batch},
                  noise_seed, static_cast<std::uint64_t>(rank)),
        sgd(model.num_params(),
            {.lr = c.lr, .momentum = c.momentum, .weight_decay = c.weight_decay}) {
    if (c.ema_decay > 0) ema.emplace(model.params(), c.ema_decay);
    const Rng rng(noise_seed, stream_for(stream::kSampler, static_cast<std::uint64_t>(rank)));
    if (c.sampling == Sampling::poisson) {
      poisson.emplace(train.rows, q, rng);
    } else {
      // This peer's share of the global batch, so that all peers together take batch_size.
      shuffle.emplace(train.rows,
                      static_cast<std::size_t>(std::max(1.0, std::round(q * train.rows))), rng);
    }
  }

  static std::uint64_t secret_seed() {
    std::random_device device;  // getrandom(2) on Linux
    return (static_cast<std::uint64_t>(device()) << 32) ^ device() ^ 1;
  }

  model::MlpSpec spec;
  model::Mlp model;
  model::Mlp released;  // what is evaluated and reported: the iterate or its average
  model::Workspace ws, eval_ws;
  std::uint64_t noise_seed;
  dp::GaussianMechanism mechanism;
  Sgd sgd;
  std::optional<ParamAverage> ema;
  dp::RdpAccountant accountant;          // the released model
  dp::RdpAccountant message_accountant;  // one peer's messages
  std::optional<PoissonSampler> poisson;
  std::optional<ShuffleSampler> shuffle;
  std::vector<std::int32_t> labels;
  StepBuffers buffers;
  double lr = 0;
  std::optional<Gossip> gossip;
  std::vector<float> scratch;  // gossip: the mean of the peers' models
  std::optional<ConsensusReport> last_consensus;  // gossip: the latest K-step report
  std::chrono::steady_clock::time_point start;
};

void Trainer::step(RunState& s, long long t, EpochTotals& totals, TrainSummary& summary) const {
  const TrainConfig& c = config_;
  // Gossip: the pre-step model goes to the neighbours while the gradient is computed at it.
  if (s.gossip) s.gossip->begin(t, s.model.params());
  const std::size_t cols = data_.train.cols;
  const auto& batch = s.poisson ? s.poisson->next() : s.shuffle->next();
  s.ws.resize(s.spec, batch.size());
  s.labels.resize(batch.size());
  float* x = s.ws.act[0].data();
  for (std::size_t i = 0; i < batch.size(); ++i) {
    std::copy_n(data_.train.features.data() + batch[i] * cols, cols, x + i * cols);
    s.labels[i] = data_.train.labels[batch[i]];
  }
  StepStats stats;
  const dp::PrivateGradient mine =
      private_gradient(s.model, s.ws, s.labels, s.mechanism, s.buffers, stats);
  // Exchange. All-reduce: the sum over the peers of their noised gradients, identical on every
  // replica. Gossip: x_i <- sum_j W_ij x_j, and the peer's own noised gradient is the update.
  const dp::PrivateGradient g =
      comm_ && !s.gossip
          ? s.mechanism.exchange(mine, [&](std::span<float> v) { comm_->allreduce(v); })
          : mine;
  if (s.gossip) s.gossip->end(s.model.params());
  s.lr = c.lr_schedule == LrSchedule::cosine
             ? c.lr * 0.5 * (1.0 + std::cos(M_PI * static_cast<double>(t) / total_steps_))
             : c.lr;
  s.sgd.set_lr(s.lr);
  s.sgd.apply(s.model.params(), g);
  if (s.ema) s.ema->update(s.model.params());
  if (c.dp) {
    s.accountant.step(q_local_, model_sigma_);
    s.message_accountant.step(q_local_, peer_sigma_);
  }

  if (!std::isfinite(stats.loss_sum) && !c.dp) {
    fail(Code::aborted, "train: the loss became non-finite at step " + std::to_string(t) +
                            " (plain SGD diverged; lower --lr)");
  }
  if (stats.batch > 0 && stats.dropped == stats.batch) {
    fail(Code::aborted, "train: every example of step " + std::to_string(t) +
                            " had a non-finite gradient; the model diverged (lower --lr)");
  }
  totals.loss_sum += stats.loss_sum;
  totals.correct += static_cast<long long>(stats.correct);
  totals.seen += static_cast<long long>(stats.batch - stats.dropped);
  summary.dropped_examples += static_cast<long long>(stats.dropped);
}

void Trainer::release(RunState& s, std::span<const float> mine) const {
  std::copy(mine.begin(), mine.end(), s.released.params().begin());
  if (s.gossip) comm_->allreduce(s.released.params(), collective::Reduce::average);
}

void Trainer::evaluate_peers(RunState& s, std::span<const float> own, std::size_t rows,
                             std::vector<double>& accuracy, std::vector<double>& loss) const {
  rows = std::min(rows, data_.test.rows);
  std::copy(own.begin(), own.end(), s.released.params().begin());
  const auto ev = s.released.evaluate(
      std::span<const float>(data_.test.features).first(rows * data_.test.cols),
      std::span<const std::int32_t>(data_.test.labels).first(rows), s.eval_ws);
  const std::size_t n = static_cast<std::size_t>(world());
  std::vector<double> v(2 * n, 0.0);  // (accuracy, loss) of each peer
  const std::size_t me = static_cast<std::size_t>(rank());
  v[2 * me] = ev.rows > 0 ? static_cast<double>(ev.correct) / ev.rows : 0.0;
  v[2 * me + 1] = ev.rows > 0 ? ev.loss_sum / ev.rows : 0.0;
  sum_over_peers(v);
  accuracy.clear();
  loss.clear();
  for (std::size_t j = 0; j < n; ++j) {
    accuracy.push_back(v[2 * j]);
    loss.push_back(v[2 * j + 1]);
  }
}

ConsensusReport Trainer::consensus(RunState& s, long long round, bool eval) const {
  const auto& phase = s.gossip->schedule().phase_at(std::max(0LL, round - 1));
  ConsensusReport r;
  r.round = round;
  r.epoch = static_cast<double>(round) * q_;
  r.consensus_distance = consensus_distance(*comm_, s.model.params(), s.scratch);
  r.topology = phase.label;
  r.rho = phase.spectrum.rho;
  if (eval && config_.metrics_eval_rows > 0) {
    // The mean of the iterates (left in s.scratch above), then each peer's own iterate.
    const std::size_t rows = static_cast<std::size_t>(config_.metrics_eval_rows);
    std::copy(s.scratch.begin(), s.scratch.end(), s.released.params().begin());
    const auto ev = evaluate_shared(s.released, s.eval_ws, rows);
    r.eval_rows = static_cast<long long>(ev.rows);
    r.test_accuracy = ev.rows > 0 ? static_cast<double>(ev.correct) / ev.rows : 0.0;
    r.test_loss = ev.rows > 0 ? ev.loss_sum / ev.rows : 0.0;
    evaluate_peers(s, s.model.params(), rows, r.peer_test_accuracy, r.peer_test_loss);
  }
  r.wall_s = seconds_since(s.start);
  return r;
}

EpochReport Trainer::evaluate_epoch(RunState& s, int epoch, long long t,
                                    const EpochTotals& totals) const {
  release(s, s.ema ? s.ema->values() : std::span<const float>(s.model.params()));
  const auto ev = evaluate_shared(s.released, s.eval_ws);
  EpochReport r;
  r.epoch = epoch;
  r.step = t;
  r.loss = totals.seen > 0 ? totals.loss_sum / totals.seen : 0.0;
  r.train_accuracy = totals.seen > 0 ? static_cast<double>(totals.correct) / totals.seen : 0.0;
  r.test_accuracy = ev.rows > 0 ? static_cast<double>(ev.correct) / ev.rows : 0.0;
  r.test_loss = ev.rows > 0 ? ev.loss_sum / ev.rows : 0.0;
  r.epsilon = config_.dp ? s.accountant.spent(config_.delta).epsilon
                         : std::numeric_limits<double>::infinity();
  r.lr = s.lr;
  if (s.gossip) {
    // At a K-step round the report is already made (the same all-reduce would give the same).
    const auto c = s.last_consensus && s.last_consensus->round == t ? *s.last_consensus
                                                                    : consensus(s, t, false);
    r.topology = c.topology;
    r.rho = c.rho;
    r.consensus_distance = c.consensus_distance;
    evaluate_peers(s, s.ema ? s.ema->values() : std::span<const float>(s.model.params()),
                   data_.test.rows, r.peer_test_accuracy, r.peer_test_loss);
  }
  return r;
}

TrainSummary Trainer::run(const std::function<void(const EpochReport&)>& on_epoch,
                          const std::function<void(const ConsensusReport&)>& on_consensus) {
  const TrainConfig& c = config_;
  model::set_blas_threads(c.threads);
  RunState s(c, data_.train, q_local_, local_batch_, peer_sigma_, rank());
  if (gossiping()) {
    s.gossip.emplace(comm_->transport(), make_schedule(gossip_phases_, 1.0 / q_),
                     s.model.num_params());
    s.scratch.resize(s.model.num_params());
  }
  if (comm_ && c.init == Init::same) {
    // Seeded initialisation already agrees; the broadcast makes it so whatever the build.
    comm_->broadcast(std::as_writable_bytes(std::span<float>(s.model.params())), 0);
    if (s.ema) s.ema.emplace(s.model.params(), c.ema_decay);
  }
  DPG_INFO("train: rank " << rank() << " of " << world() << ", " << data_.train.rows
                          << " examples here (" << total_rows_ << " in all), q = " << q_ << ", "
                          << total_steps_ << " steps, " << (c.dp ? "DP-SGD" : "plain SGD")
                          << ", noise multiplier " << sigma_ << " (each peer adds "
                          << peer_sigma_ << ", "
                          << (gossiping() ? "local" : to_string(c.noise_mode)) << " noise), clip "
                          << c.clip_norm << ", noise seed "
                     << (c.noise_seed != 0 ? "from the config" : "secret (OS entropy)")
                     << ", config " << dpg::to_json(c).dump());
  if (s.gossip) {
    for (const auto& p : s.gossip->schedule().phases()) {
      DPG_INFO("train: gossip on " << p.label << " from round " << p.start_round << ": rho "
                                   << p.spectrum.rho << ", spectral gap "
                                   << p.spectrum.spectral_gap << "; this peer samples at q = "
                                   << q_local_);
    }
  }
  if (c.dp && c.sampling != Sampling::poisson) {
    DPG_WARN("train: sampling is 'shuffle'; the reported epsilon assumes Poisson sampling");
  }
  TrainSummary summary;
  summary.sample_rate = q_;
  summary.noise_multiplier = model_sigma_;
  summary.peer_noise_multiplier = peer_sigma_;
  summary.peers = world();
  summary.steps = total_steps_;
  const int epochs = static_cast<int>(std::ceil(c.epochs - 1e-9));
  const auto start = Clock::now();
  s.start = start;
  double train_seconds = 0, metrics_seconds = 0;
  long long samples = 0;
  long long t = 0;
  // The consensus distance every metrics_every rounds, kept out of the throughput figure.
  auto report_consensus = [&](long long round) {
    if (!s.gossip || c.metrics_every <= 0 || round % c.metrics_every != 0) return;
    const auto begin = Clock::now();
    s.last_consensus = consensus(s, round, true);
    if (on_consensus) on_consensus(*s.last_consensus);
    metrics_seconds += seconds_since(begin);
  };
  report_consensus(0);
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    const long long end =
        std::min<long long>(total_steps_, static_cast<long long>(std::ceil(epoch / q_ - 1e-9)));
    const auto epoch_start = Clock::now();
    const long long epoch_begin = t;
    EpochTotals totals;
    for (; t < end; ++t) {
      step(s, t, totals, summary);
      report_consensus(t + 1);
    }
    train_seconds += seconds_since(epoch_start) - metrics_seconds;
    metrics_seconds = 0;
    // Training loss and accuracy come from this peer's private batches and stay here (they are
    // not noised); throughput over all peers uses the public expected batch size instead.
    samples += world() == 1 ? totals.seen
                            : static_cast<long long>(std::llround((end - epoch_begin) *
                                                                  c.batch_size));
    EpochReport r = evaluate_epoch(s, epoch, t, totals);
    r.wall_s = seconds_since(start);
    r.samples_per_second = train_seconds > 0 ? samples / train_seconds : 0.0;
    on_epoch(r);
    summary.test_accuracy = r.test_accuracy;
    summary.peer_test_accuracy = r.peer_test_accuracy;
  }
  release(s, s.model.params());
  const auto last = evaluate_shared(s.released, s.eval_ws);
  summary.test_accuracy_last_iterate =
      last.rows > 0 ? static_cast<double>(last.correct) / last.rows : 0.0;
  const auto spent = c.dp ? s.accountant.spent(c.delta)
                          : dp::PrivacySpent{std::numeric_limits<double>::infinity(),
                                             std::numeric_limits<double>::quiet_NaN()};
  summary.epsilon = spent.epsilon;
  summary.message_epsilon = c.dp ? s.message_accountant.spent(c.delta).epsilon
                                 : std::numeric_limits<double>::infinity();
  summary.best_alpha = spent.best_alpha;
  if (s.gossip) {
    // Every peer's epsilon from its own sampling rate; the run reports the worst.
    for (double qj : peer_q_) {
      summary.peer_epsilons.push_back(
          c.dp ? dp::epsilon_for(qj, sigma_, total_steps_, c.delta).epsilon
               : std::numeric_limits<double>::infinity());
    }
    const auto worst = std::max_element(summary.peer_epsilons.begin(), summary.peer_epsilons.end());
    summary.epsilon = summary.message_epsilon = *worst;
    if (c.dp) {
      summary.best_alpha =
          dp::epsilon_for(peer_q_[worst - summary.peer_epsilons.begin()], sigma_, total_steps_,
                          c.delta)
              .best_alpha;
    }
    const auto& phase = s.gossip->schedule().phase_at(std::max(0LL, total_steps_ - 1));
    summary.topology = phase.label;
    summary.rho = phase.spectrum.rho;
    summary.spectral_gap = phase.spectrum.spectral_gap;
  } else {
    summary.topology = to_string(c.algo);
  }
  summary.samples_per_second = train_seconds > 0 ? samples / train_seconds : 0.0;
  summary.wall_s = seconds_since(start);
  summary.accountant = s.accountant.to_json();
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
