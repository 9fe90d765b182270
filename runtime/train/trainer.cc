#include "runtime/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <optional>

#include "dp/accountant.h"
#include "dp/mechanism.h"
#include "runtime/collective/nccl/nccl_communicator.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/model/blas_threads.h"
#include "runtime/model/mlp.h"
#include "runtime/train/algorithm.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/gradient.h"
#include "runtime/train/optimizer.h"
#include "runtime/train/run_state.h"
#include "runtime/train/sampler.h"

namespace dpg::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

Trainer::Trainer(TrainConfig config, data::Prepared data, collective::Communicator* comm,
                 std::vector<GossipPhase> phases, trace::Tracer* tracer)
    : config_(std::move(config)),
      data_(std::move(data)),
      comm_(comm),
      phases_(std::move(phases)),
      tracer_(tracer) {
  validate(config_);
  if (config_.init == Init::independent && !algo_info(config_.algo).uses_graph) {
    // The other algorithms keep one model (or average to one): peers starting apart would
    // evaluate and report a mixture of different models.
    fail(Code::invalid_argument, "/init: independent needs a graph algorithm (gossip or "
                                 "ad-psgd), not " + to_string(config_.algo));
  }
  if (config_.secure_aggregation) {
    if (!config_.dp) fail(Code::invalid_argument, "/secure_aggregation: needs dp (it aggregates noised gradients)");
    if (config_.algo != Algo::allreduce) {
      fail(Code::invalid_argument, "/secure_aggregation: only with algo allreduce (the masks cancel in a sum over every "
          "peer), not " + to_string(config_.algo));
    }
    if (config_.noise_mode != NoiseMode::distributed) {
      fail(Code::invalid_argument, "/secure_aggregation: needs noise_mode distributed (the sum carries the noise; "
          "masked messages need no noise of their own)");
    }
    if (config_.bucket_bytes > 0) fail(Code::invalid_argument, "/secure_aggregation: not with bucket_bytes (one masked sum per step)");
    if (config_.hierarchical) fail(Code::invalid_argument, "/secure_aggregation: not with hierarchical (the masks cancel only in the flat sum)");
  }
  if (config_.transport == TransportMode::nccl) {
    if (!parse_device(config_.device).cuda) {
      fail(Code::invalid_argument, "/transport: nccl reduces on the GPU of device cuda or cuda:N, "
                                   "not on device " + config_.device);
    }
    if (config_.algo != Algo::allreduce && config_.algo != Algo::local_sgd &&
        config_.algo != Algo::gossip) {
      fail(Code::invalid_argument,
           "/transport: nccl carries the all-reduces of allreduce and local-sgd and gossip's "
           "neighbour exchange, not " + to_string(config_.algo) +
               "'s messages (use auto, tcp or shm)");
    }
    if (config_.bucket_bytes > 0 || config_.hierarchical) {
      fail(Code::invalid_argument, std::string("/transport: nccl reduces the whole gradient at "
                                               "once; not with ") +
                                       (config_.bucket_bytes > 0 ? "bucket_bytes" : "hierarchical"));
    }
  }
  if (parse_device(config_.device).cuda && (config_.secure_noise || config_.secure_aggregation)) {
    fail(Code::invalid_argument,
         std::string("/device: ") + config_.device + " draws Philox noise on the GPU; " +
             (config_.secure_noise ? "secure_noise" : "secure_aggregation") +
             " draws its noise on the CPU (use device cpu)");
  }
  if (data_.train.rows == 0) {
    fail(Code::invalid_argument,
         "train: rank " + std::to_string(rank()) + "'s training shard is empty");
  }
  if (config_.eval_split == EvalSplit::validation && data_.validation.rows == 0) {
    fail(Code::invalid_argument, "/eval_split: the data folder " + config_.data +
                                     " holds no validation rows (prepare it with --validation N)");
  }
  // Every peer's shard size (public: the manifest has them), for the sampling rates.
  std::vector<double> rows(static_cast<std::size_t>(world()), 0.0);
  rows[static_cast<std::size_t>(rank())] = static_cast<double>(data_.train.rows);
  if (comm_) comm_->allreduce(std::span<double>(rows), collective::Reduce::sum);
  for (double r : rows) total_rows_ += r;
  if (config_.batch_size > total_rows_) {
    fail(Code::invalid_argument, "batch_size: " + std::to_string(config_.batch_size) +
                                     " exceeds the " + std::to_string(total_rows_) +
                                     " training examples");
  }
  dp::PlanInputs in;
  in.dp = config_.dp;
  in.release = world() > 1 ? algo_info(config_.algo).release : dp::Release::summed;
  in.distributed_noise = config_.noise_mode == NoiseMode::distributed;
  in.target_messages = config_.target == PrivacyTarget::messages;
  in.shard_rows = rows;
  in.batch_size = config_.batch_size;
  in.epochs = config_.epochs;
  in.noise_multiplier = config_.noise_multiplier;
  in.target_epsilon = config_.target_epsilon;
  in.delta = config_.delta;
  in.accountant = config_.accountant == PrivacyAccountant::pld ? dp::AccountantKind::pld
                                                               : dp::AccountantKind::rdp;
  in.secure_aggregation = config_.secure_aggregation;
  if (in.secure_aggregation) {
    // d, for the rounding's share of the grid's sensitivity: sum over layers of (in + 1) * out.
    const std::vector<int> w = spec_for(config_, data_.train).widths();
    for (std::size_t l = 0; l + 1 < w.size(); ++l) in.num_params += double(w[l] + 1) * w[l + 1];
  }
  try {
    plan_ = agreed_plan(in);
  } catch (const Error& e) {
    fail(e.code(), std::string("train: ") + e.what());
  }
}

dp::PrivacyPlan Trainer::agreed_plan(const dp::PlanInputs& in) const {
  // The noise multiplier's search (a dozen accountant evaluations, seconds with PLD at small
  // rates) runs once, on rank 0, not on every peer at once. Each other peer takes rank 0's
  // multiplier only after checking that it meets the target by its own evaluation, the property
  // calibration guarantees: a peer's privacy never rests on another peer's word.
  if (comm_ == nullptr || world() == 1 || !in.dp || in.noise_multiplier > 0 ||
      in.secure_aggregation) {
    return dp::plan_privacy(in);
  }
  double sigma = std::numeric_limits<double>::quiet_NaN();  // NaN: rank 0's plan failed
  std::optional<dp::PrivacyPlan> mine;
  std::exception_ptr error;
  if (rank() == 0) {
    try {
      mine = dp::plan_privacy(in);
      sigma = mine->sigma;
    } catch (...) {
      error = std::current_exception();
    }
  }
  try {
    comm_->broadcast(std::as_writable_bytes(std::span<double>(&sigma, 1)), 0);
  } catch (const Error& e) {
    fail(e.code(), std::string("waiting for rank 0's calibrated noise multiplier: ") + e.what());
  }
  if (rank() == 0) {
    if (error) std::rethrow_exception(error);
    return *mine;
  }
  if (std::isnan(sigma)) return dp::plan_privacy(in);  // rank 0 failed: the same error here
  return dp::plan_with_multiplier_from(in, sigma, "rank " + std::to_string(rank()) + ": rank 0");
}

Trainer::~Trainer() = default;

std::span<const float> Trainer::params() const {
  return state_ ? std::span<const float>(state_->model.params()) : std::span<const float>();
}

void Trainer::log_start() const {
  const TrainConfig& c = config_;
  DPG_INFO("train: rank " << rank() << " of " << world() << ", " << to_string(c.algo) << ", "
                          << data_.train.rows << " examples here (" << total_rows_
                          << " in all), q = " << plan_.q << " (this peer samples at "
                          << plan_.peer_q[static_cast<std::size_t>(rank())] << "), "
                          << plan_.steps << " steps, " << (c.dp ? "DP-SGD" : "plain SGD")
                          << ", noise multiplier " << plan_.sigma << " (each peer adds "
                          << plan_.peer_sigma << ", " << plan_.noise_mode
                          << " noise; the model's " << plan_.model_sigma << "), clip "
                          << c.clip_norm
                          << (!c.secure_noise ? ""
                              : c.secure_aggregation
                                  ? ", noise from ChaCha20 under a 256-bit key from the OS "
                                    "(Skellam on secure aggregation's grid)"
                                  : ", noise from ChaCha20 under a 256-bit key from the OS "
                                    "(examples summed and noised on an integer grid)")
                          << (c.secure_noise ? ", sampler seed secret (OS entropy)"
                              : c.noise_seed != 0 ? ", noise seed from the config"
                                                  : ", noise seed secret (OS entropy)"));
  if (c.dp && c.sampling != Sampling::poisson) {
    DPG_WARN("train: sampling is 'shuffle'; the reported epsilon assumes Poisson sampling");
  }
}

dp::PrivateGradient Trainer::cpu_gradient(RunState& s, long long t, StepStats& stats) const {
  // Sample this peer's batch into the workspace.
  trace::Span sample(tracer_, "sample", "compute");
  const std::size_t cols = data_.train.cols;
  const auto& batch = s.poisson ? s.poisson->next() : s.shuffle->next();
  s.ws.resize(s.spec, batch.size());
  s.labels.resize(batch.size());
  float* x = s.ws.act[0].data();
  for (std::size_t i = 0; i < batch.size(); ++i) {
    std::copy_n(data_.train.features.data() + batch[i] * cols, cols, x + i * cols);
    s.labels[i] = data_.train.labels[batch[i]];
  }
  sample.end();
  // Forward, backward with per-example norms, clip and noise.
  GradientSink sink;  // the layers as they are released, to an algorithm that streams them
  if (s.algorithm->streams_gradient()) {
    sink = [&](const dp::PrivateGradient& part, std::size_t offset) {
      s.algorithm->on_gradient_part(t, part, offset);
    };
  }
  SumHook before_noise;
  if (sum_hook_) before_noise = [&](std::span<float> sum) { sum_hook_(t, sum); };
  return private_gradient(s.model, s.ws, s.labels, s.mechanism, s.buffers, stats, sink,
                          s.algorithm->gradient_part_values(), tracer_, before_noise);
}

std::optional<dp::PrivateGradient> Trainer::device_gradient(RunState& s, long long t,
                                                            StepStats& stats) const {
  trace::Span sample(tracer_, "sample", "compute");
  const auto& batch = s.poisson ? s.poisson->next() : s.shuffle->next();
  s.device_rows.assign(batch.begin(), batch.end());
  sample.end();
  trace::Span pass(tracer_, "device_gradient", "compute");
  // Off the device-resident path the host model is the algorithm's (it may have mixed,
  // averaged or restored it), and the device computes at it.
  if (!s.resident) s.device->upload_params(s.model.params());
  const dp::MechanismOptions& o = s.mechanism.options();
  const model::DeviceStepStats d = s.device->gradient(
      s.device_rows, t,
      {.enabled = o.enabled, .clip_norm = o.clip_norm, .noise_multiplier = o.noise_multiplier,
       .expected_batch = o.expected_batch, .seed = s.noise_seed,
       .rank = static_cast<std::uint64_t>(rank())});
  stats = {.batch = d.batch, .loss_sum = d.loss_sum, .correct = d.correct, .dropped = d.dropped,
           .clipped = d.clipped};
  pass.end();
  if (s.resident && !s.algorithm->needs_host_gradient()) return std::nullopt;
  // To the host through the staging buffers. An algorithm that streams its gradient gets it in
  // the CPU's pieces, each as it lands, so that every peer forms the same buckets whatever its
  // device and the first buckets go out while the rest crosses.
  trace::Span copy(tracer_, "gradient_to_host", "comm");
  const bool streams = s.algorithm->streams_gradient();
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  if (streams) {
    for (const ReleasePiece& p : release_pieces(s.model, s.algorithm->gradient_part_values())) {
      ranges.emplace_back(p.range.first, p.range.second - p.range.first);
    }
  } else {
    ranges = model::chunk_ranges(s.model.num_params(), model::kStagingChunk);
  }
  dp::GaussianMechanism::PartSink on_part;
  if (streams) {
    on_part = [&](const dp::PrivateGradient& part, std::size_t offset) {
      s.algorithm->on_gradient_part(t, part, offset);
    };
  }
  return s.mechanism.release_from_device(
      [&](std::span<float> out, const dp::GaussianMechanism::Arrived& arrived) {
        s.device->stream_out(model::DeviceArray::gradient, ranges,
                             [&](std::size_t offset, std::span<const float> v) {
                               std::copy(v.begin(), v.end(),
                                         out.begin() + static_cast<long>(offset));
                               arrived(offset, v.size());
                             });
      },
      on_part);
}

void Trainer::pull_model(RunState& s, bool momentum) const {
  if (!s.resident) return;
  if (!s.host_current) {
    model::stream_out_all(*s.device, model::DeviceArray::params, s.model.params());
    if (s.ema) model::stream_out_all(*s.device, model::DeviceArray::average, s.ema->values());
    s.host_current = true;
  }
  if (momentum) {
    std::vector<float> v(s.model.num_params());
    s.device->download_momentum(v);
    s.sgd.restore(v, s.device->momentum_started());
  }
}

void Trainer::push_model(RunState& s) const {
  s.device->stream_in(model::DeviceArray::params, 0, s.model.params());
  if (s.ema) s.device->stream_in(model::DeviceArray::average, 0, s.ema->values());
  s.device->restore_momentum(s.sgd.momentum_buffer(), s.sgd.started());
  s.host_current = true;
}

void Trainer::step(RunState& s, long long t, EpochTotals& totals, TrainSummary& summary) const {
  const TrainConfig& c = config_;
  if (tracer_) tracer_->set_step(t);
  StepStats stats;
  s.lr = scheduled_lr(c, t, plan_.steps);
  s.sgd.set_lr(s.lr);
  if (s.resident) {
    s.algorithm->before_gradient_on_device(t);
    const std::optional<dp::PrivateGradient> mine = device_gradient(s, t, stats);
    // Exchange and update, on the device.
    trace::Span update(tracer_, "update", "compute");
    const SgdOptions& o = s.sgd.options();
    s.algorithm->apply_on_device(t, mine ? &*mine : nullptr,
                                 {.lr = o.lr, .momentum = o.momentum,
                                  .weight_decay = o.weight_decay, .nesterov = o.nesterov});
    s.host_current = false;
    if (s.ema) s.device->average_step(static_cast<float>(s.ema->decay()));
  } else {
    s.algorithm->before_gradient(t, s.model.params());
    const dp::PrivateGradient mine = s.device ? *device_gradient(s, t, stats)
                                              : cpu_gradient(s, t, stats);
    // Exchange and update.
    trace::Span update(tracer_, "update", "compute");
    s.algorithm->apply(t, mine, s.model.params(), s.sgd);
    if (s.ema) s.ema->update(s.model.params());
  }
  // Account.
  plan_.charge(s.accountant, s.message_accountant);

  if (!std::isfinite(stats.loss_sum) && !c.dp) {
    fail(Code::aborted, "train: the loss became non-finite at step " + std::to_string(t) +
                            " (plain SGD diverged; lower --lr)");
  }
  if (stats.batch > 0 && stats.dropped == stats.batch) {
    // Not an abort, which every other peer would see: a fact about this peer's private batch.
    // Its noised gradient was noise alone, as DP-SGD's mechanism gives for an empty batch; the
    // skip is counted here and reported only with report_dropped.
    if (summary.skipped_batches == 0) {
      DPG_WARN("train: every example of step "
               << t << " had a non-finite value and the batch was skipped (its update is noise "
               << "alone); if this repeats the model has diverged (lower --lr). The count is "
               << "kept on this peer" << (c.report_dropped ? "" : " (--report-dropped reports it)"));
    }
    ++summary.skipped_batches;
  }
  totals.loss_sum += stats.loss_sum;
  totals.correct += static_cast<long long>(stats.correct);
  totals.seen += static_cast<long long>(stats.batch - stats.dropped);
  summary.dropped_examples += static_cast<long long>(stats.dropped);
}

ConsensusReport Trainer::consensus(RunState& s, long long round, bool eval) const {
  trace::Span span(tracer_, "consensus", "eval");
  pull_model(s, false);
  ConsensusReport r;
  r.round = round;
  r.epoch = static_cast<double>(round) * plan_.q;
  r.consensus_distance = consensus_distance(*comm_, s.model.params(), s.scratch);
  const Spent e = spent(s, round);
  r.epsilon = e.model.epsilon;
  r.message_epsilon = e.messages;
  r.split = to_string(config_.eval_split);
  if (plan_.secure_aggregation) r.extra["peers_epsilon"] = e.messages;
  s.algorithm->annotate(r.extra, round, false);
  if (eval && config_.metrics_eval_rows > 0) {
    // The mean of the iterates (left in s.scratch above), then each peer's own iterate.
    const std::size_t rows = static_cast<std::size_t>(config_.metrics_eval_rows);
    std::copy(s.scratch.begin(), s.scratch.end(), s.released.params().begin());
    const auto ev = s.evaluator->shared(s.released, s.eval_ws, rows);
    r.eval_rows = static_cast<long long>(ev.rows);
    r.test_accuracy = accuracy_of(ev);
    r.test_loss = loss_of(ev);
    s.evaluator->per_peer(s.model, s.eval_ws, rows, r.peer_test_accuracy, r.peer_test_loss);
  }
  r.wall_s = seconds_since(s.start);
  return r;
}

Trainer::Spent Trainer::spent(const RunState& s, long long t) const {
  if (!plan_.dp) return {plan_.model_after(t), plan_.messages_after(t).epsilon};
  return {s.accountant.spent(config_.delta), s.message_accountant.spent(config_.delta).epsilon};
}

EpochReport Trainer::evaluate_epoch(RunState& s, int epoch, long long t,
                                    const EpochTotals& totals) const {
  trace::Span span(tracer_, "eval", "eval");
  pull_model(s, false);
  const std::span<const float> mine =
      s.ema ? s.ema->values() : std::span<const float>(s.model.params());
  s.algorithm->release(mine, s.released.params());
  const auto ev = s.evaluator->shared(s.released, s.eval_ws);
  EpochReport r;
  r.epoch = epoch;
  r.step = t;
  r.loss = totals.seen > 0 ? totals.loss_sum / totals.seen : 0.0;
  r.train_accuracy = totals.seen > 0 ? static_cast<double>(totals.correct) / totals.seen : 0.0;
  r.split = to_string(config_.eval_split);
  r.test_accuracy = accuracy_of(ev);
  r.test_loss = loss_of(ev);
  const Spent e = spent(s, t);
  r.epsilon = e.model.epsilon;
  r.message_epsilon = e.messages;
  r.lr = s.lr;
  if (plan_.secure_aggregation) r.extra["peers_epsilon"] = e.messages;
  s.algorithm->annotate(r.extra, t, false);
  if (s.algorithm->replicas_differ() && comm_) {
    // At a K-step round the report is already made (the same all-reduce would give the same).
    const auto c = s.last_consensus && s.last_consensus->round == t ? *s.last_consensus
                                                                    : consensus(s, t, false);
    r.consensus_distance = c.consensus_distance;
    // Each peer's own model (its average when on), on the whole test split.
    std::copy(mine.begin(), mine.end(), s.released.params().begin());
    s.evaluator->per_peer(s.released, s.eval_ws, eval_data().rows, r.peer_test_accuracy,
                          r.peer_test_loss);
  }
  return r;
}

long long Trainer::epoch_end(int epoch) const {
  // The last epoch ends at the plan's step count, whatever the rounding of epoch / q.
  const int epochs = epoch_count(config_);
  if (epoch <= 0) return 0;
  if (epoch >= epochs) return plan_.steps;
  return std::min<long long>(plan_.steps,
                             static_cast<long long>(std::ceil(epoch / plan_.q - 1e-9)));
}

TrainSummary Trainer::run(const std::function<void(const EpochReport&)>& on_epoch,
                          const std::function<void(const ConsensusReport&)>& on_consensus) {
  // A step that fails on a check of its own (a malformed reply, a held step) can leave messages
  // posted into or out of the run state's buffers (the algorithm's among them), which go when
  // this trainer does: the transport must move no more bytes through them, and the peers learn
  // now that this one has stopped, and why.
  const auto poison = [this](const std::string& why) {
    if (!comm_) return;
    const std::string own = "rank " + std::to_string(rank()) + ": ";
    comm_->transport().poison(Code::aborted, own + "stopped on an error of its own: " +
                                                 (why.rfind(own, 0) == 0 ? why.substr(own.size()) : why));
  };
  try {
    return run_steps(on_epoch, on_consensus);
  } catch (const std::exception& e) {
    poison(e.what());
    throw;
  } catch (...) {
    poison("(see its log)");
    throw;
  }
}

TrainSummary Trainer::run_steps(const std::function<void(const EpochReport&)>& on_epoch,
                                const std::function<void(const ConsensusReport&)>& on_consensus) {
  const TrainConfig& c = config_;
  model::set_blas_threads(c.threads);
  state_ = std::make_unique<RunState>(c, data_.train, plan_, rank());
  RunState& s = *state_;
  // The GPU first, before this run's first collective: a peer without one fails at once.
  if (const DeviceChoice d = parse_device(c.device); d.cuda) {
    if (sum_hook_) {
      fail(Code::failed_precondition,
           "/device: the audit's canaries join the clipped sum on the CPU; use device cpu");
    }
    if (device_factory_) {
      s.device = device_factory_(s.spec, s.model.params());
    } else {
      std::string why;
      const int n = model::cuda_device_count(&why);
      if (n == 0 || d.index >= n) {
        fail(Code::unavailable, "/device: rank " + std::to_string(rank()) + " asked for " +
                                    c.device + ": " +
                                    (n == 0 ? why : "this machine has " + std::to_string(n) +
                                                        " CUDA devices, numbered from 0"));
      }
      s.device = model::make_cuda_mlp(s.spec, d.index >= 0 ? d.index : rank() % n,
                                      s.model.params());
    }
    s.device->upload_rows(data_.train.features, data_.train.labels);
    DPG_INFO("train: rank " << rank() << " computes on " << s.device->device_name());
    if (comm_ && c.transport == TransportMode::nccl) {
      // Collective: every peer sets up NCCL here, on the GPU it computes on.
      s.direct = direct_factory_
                     ? direct_factory_(*comm_)
                     : collective::make_nccl_collectives(
                           *comm_, d.index >= 0 ? d.index
                                                : rank() % std::max(1, model::cuda_device_count(nullptr)));
      if (auto route = s.direct->host_route()) {
        comm_->route_float_allreduce(std::move(route));
        s.float_route.comm = comm_;
      }
      DPG_INFO("train: rank " << rank() << ": " << to_string(c.algo)
                              << "'s messages and the float all-reduces through NCCL");
    }
  }
  s.evaluator.emplace(eval_data(), comm_);
  if (comm_ && c.init == Init::same) {
    // Seeded initialisation already agrees; the broadcast makes it so whatever the build.
    comm_->broadcast(std::as_writable_bytes(std::span<float>(s.model.params())), 0);
  }
  if (c.ema_decay > 0) s.ema.emplace(s.model.params(), c.ema_decay);
  s.scratch.resize(s.model.num_params());
  s.algorithm = make_algorithm({.config = c,
                                .comm = comm_,
                                .plan = plan_,
                                .mechanism = s.mechanism,
                                .num_params = s.model.num_params(),
                                .phases = phases_,
                                .steps_per_epoch = 1.0 / plan_.q,
                                .tracer = tracer_,
                                .host_of = host_of_,
                                .device = s.device.get(),
                                .direct = s.direct.get()});
  s.resident = s.device != nullptr && s.algorithm->updates_on_device();
  log_start();
  TrainSummary summary;
  summary.peers = world();
  summary.steps = plan_.steps;
  Progress p = start_checkpoints(s, summary);
  if (s.resident) {
    push_model(s);  // the broadcast's or the checkpoint's model and momentum
    DPG_INFO("train: rank " << rank() << ": the model and its updates stay on the device");
  }
  const bool differ = s.algorithm->replicas_differ() && comm_ != nullptr;
  const int epochs = epoch_count(c);
  s.start = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(p.wall_seconds));
  double metrics_seconds = 0;
  // The consensus distance every metrics_every steps, kept out of the throughput figure.
  auto report_consensus = [&](long long round) {
    if (!differ || c.metrics_every <= 0 || round % c.metrics_every != 0) return;
    // Waiting here for slower peers is training time (local SGD's peers meet only every H
    // steps, so their skew is whole steps): only what follows the barrier is metrics.
    comm_->barrier();
    const auto begin = Clock::now();
    s.last_consensus = consensus(s, round, true);
    if (on_consensus) on_consensus(*s.last_consensus);
    metrics_seconds += seconds_since(begin);
  };
  if (p.step == 0) report_consensus(0);  // a resumed run reported its start before it stopped
  metrics_seconds = 0;  // before the first epoch's clock starts: not to be taken off its time
  int epoch = 1;
  while (epoch < epochs && epoch_end(epoch) <= p.step) ++epoch;  // the epoch of step p.step
  for (; epoch <= epochs; ++epoch) {
    const long long end = epoch_end(epoch);
    const auto epoch_start = Clock::now();
    const double train_before = p.train_seconds;
    for (; p.step < end; ++p.step) {
      p.train_seconds = train_before + seconds_since(epoch_start) - metrics_seconds;
      p.wall_seconds = seconds_since(s.start);
      if (at_boundary(s, p, p.step == epoch_end(epoch - 1))) {
        summary.stopped_at = p.step;
        pull_model(s, false);
        s.algorithm->finish(s.model.params());
        break;
      }
      if (step_hook_) step_hook_(p.step);
      EpochTotals totals{p.loss_sum, p.seen, p.correct};
      step(s, p.step, totals, summary);
      p.loss_sum = totals.loss_sum;
      p.seen = totals.seen;
      p.correct = totals.correct;
      p.dropped = summary.dropped_examples;
      p.skipped = summary.skipped_batches;
      report_consensus(p.step + 1);
    }
    if (summary.stopped_at >= 0) break;
    if (p.step == plan_.steps) {
      pull_model(s, false);
      s.algorithm->finish(s.model.params());
    }
    p.train_seconds = train_before + seconds_since(epoch_start) - metrics_seconds;
    metrics_seconds = 0;
    // Training loss and accuracy come from this peer's private batches and stay here (they are
    // not noised); throughput over all peers uses the public expected batch size instead.
    p.samples += world() == 1 ? p.seen
                              : static_cast<long long>(std::llround(
                                    static_cast<double>(end - epoch_end(epoch - 1)) *
                                    c.batch_size));
    EpochReport r = evaluate_epoch(s, epoch, p.step, {p.loss_sum, p.seen, p.correct});
    r.wall_s = seconds_since(s.start);
    r.samples_per_second = throughput(static_cast<double>(p.samples), p.train_seconds);
    r.report_dropped = c.report_dropped;
    r.dropped_examples = p.dropped - p.epoch_dropped_before;
    r.skipped_batches = p.skipped - p.epoch_skipped_before;
    if (tracer_ && std::isfinite(r.epsilon)) tracer_->counter("epsilon", r.epsilon);
    on_epoch(r);
    summary.evaluated = true;
    summary.test_accuracy = r.test_accuracy;
    summary.peer_test_accuracy = r.peer_test_accuracy;
    p.loss_sum = 0;
    p.seen = p.correct = 0;
    p.epoch_dropped_before = p.dropped;
    p.epoch_skipped_before = p.skipped;
  }
  const long long taken = p.step + summary.replay_charged_steps;
  pull_model(s, true);  // the model and optimiser params() and the caller see
  if (summary.stopped_at < 0) {
    s.algorithm->release(s.model.params(), s.released.params());
    summary.test_accuracy_last_iterate = accuracy_of(s.evaluator->shared(s.released, s.eval_ws));
  }
  const Spent e = spent(s, taken);
  summary.epsilon = e.model.epsilon;
  summary.best_alpha = e.model.best_alpha;
  summary.message_epsilon = e.messages;
  if (plan_.secure_aggregation) {
    summary.extra["peers_epsilon"] = e.messages;
    summary.extra["secure_aggregation"] = {{"grid_scale", plan_.secagg.grid_scale},
                                           {"skellam_mu", plan_.secagg.mu},
                                           {"l1_sensitivity", plan_.secagg.l1},
                                           {"l2_sensitivity", plan_.secagg.l2},
                                           {"overflow_bound", plan_.secagg.overflow_bound}};
  }
  if (plan_.release == dp::Release::own && world() > 1) {
    summary.peer_epsilons = plan_.peer_epsilons_after(taken);
  }
  s.algorithm->annotate(summary.extra, p.step, true);
  summary.samples_per_second = throughput(static_cast<double>(p.samples), p.train_seconds);
  summary.wall_s = seconds_since(s.start);
  summary.dropped_examples = p.dropped;
  summary.skipped_batches = p.skipped;
  summary.accountant = s.accountant.to_json();
  return summary;
}

}  // namespace dpg::train
