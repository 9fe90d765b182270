// The Trainer's step (trainer.h): sample, forward, backward with per-example norms, clip and
// noise, exchange and update, account; on the CPU or on the GPU of --device cuda.
#include <algorithm>
#include <cmath>
#include <optional>

#include "dp/mechanism.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/model/mlp.h"
#include "runtime/train/algorithm.h"
#include "runtime/train/gradient.h"
#include "runtime/train/run_state.h"
#include "runtime/train/sampler.h"
#include "runtime/train/trainer.h"

namespace dpg::train {

using Clock = std::chrono::steady_clock;

dp::PrivateGradient Trainer::cpu_gradient(RunState& s, long long t, StepStats& stats) const {
  // Sample this peer's batch into the workspace.
  trace::Span sample(in_.tracer, "sample", "compute");
  const std::size_t cols = in_.data.train.cols;
  const auto& batch = s.poisson ? s.poisson->next() : s.shuffle->next();
  // Virtual batches: at most physical_batch rows in the workspace at a time.
  const std::size_t most = s.pass_rows;
  const std::size_t per = most == 0 ? std::max<std::size_t>(batch.size(), 1) : most;
  const std::size_t pieces = std::max<std::size_t>(1, (batch.size() + per - 1) / per);
  auto load = [&](std::size_t k, model::Workspace& ws) -> std::span<const std::int32_t> {
    const std::size_t first = std::min(batch.size(), k * per);
    const std::size_t n = std::min(batch.size(), first + per) - first;
    ws.resize(s.spec, n);
    s.labels.resize(n);
    float* x = ws.act[0].data();
    for (std::size_t i = 0; i < n; ++i) {
      std::copy_n(in_.data.train.features.data() + batch[first + i] * cols, cols, x + i * cols);
      s.labels[i] = in_.data.train.labels[batch[first + i]];
    }
    return s.labels;
  };
  // One piece is loaded here; more, each as private_gradient comes to it.
  const std::span<const std::int32_t> labels =
      pieces == 1 ? load(0, s.ws) : std::span<const std::int32_t>{};
  sample.end();
  // Forward, backward with per-example norms, clip and noise.
  GradientSink sink;  // the layers as they are released, to an algorithm that streams them
  if (s.algorithm->streams_gradient()) {
    sink = [&](const dp::PrivateGradient& part, std::size_t offset) {
      s.algorithm->on_gradient_part(t, part, offset);
    };
  }
  SumHook before_noise;
  if (in_.hooks.sum) before_noise = [&](std::span<float> sum) { in_.hooks.sum(t, sum); };
  if (pieces == 1) {
    return private_gradient(s.model, s.ws, labels, s.mechanism, s.buffers, stats, sink,
                            s.algorithm->gradient_part_values(), in_.tracer, before_noise);
  }
  return private_gradient(s.model, s.ws, labels, pieces, load, s.mechanism, s.buffers, stats,
                          sink, s.algorithm->gradient_part_values(), in_.tracer, before_noise);
}

std::optional<dp::PrivateGradient> Trainer::device_gradient(RunState& s, long long t,
                                                            StepStats& stats) const {
  trace::Span sample(in_.tracer, "sample", "compute");
  const auto& batch = s.poisson ? s.poisson->next() : s.shuffle->next();
  s.device_rows.assign(batch.begin(), batch.end());
  sample.end();
  trace::Span pass(in_.tracer, "device_gradient", "compute");
  // Off the device-resident path the host model is the algorithm's (it may have mixed,
  // averaged or restored it), and the device computes at it.
  if (!s.resident) s.device->upload_params(s.model.params());
  const dp::MechanismOptions& o = s.mechanism.options();
  const model::DeviceStepStats d = s.device->gradient(
      s.device_rows, t,
      {.enabled = o.enabled, .clip_norm = o.clip_norm, .noise_multiplier = o.noise_multiplier,
       .expected_batch = o.expected_batch, .seed = s.noise_seed,
       .rank = static_cast<std::uint64_t>(rank()),
       .physical_batch = s.pass_rows});
  stats = {.batch = d.batch, .loss_sum = d.loss_sum, .correct = d.correct, .dropped = d.dropped,
           .clipped = d.clipped};
  pass.end();
  if (s.resident && !s.algorithm->needs_host_gradient()) return std::nullopt;
  // To the host through the staging buffers. An algorithm that streams its gradient gets it in
  // the CPU's pieces, each as it lands, so that every peer forms the same buckets whatever its
  // device and the first buckets go out while the rest crosses.
  trace::Span copy(in_.tracer, "gradient_to_host", "comm");
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

void Trainer::stretch(RunState& s, long long t, Clock::time_point worked_from) const {
  if (!s.straggler) return;
  trace::Span slow(in_.tracer, "slowdown", "compute");
  s.straggler->stretch(t, std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() -
                                                                              worked_from));
}

void Trainer::step(RunState& s, long long t, EpochTotals& totals, TrainSummary& summary) const {
  const TrainConfig& c = in_.config;
  if (in_.tracer) in_.tracer->set_step(t);
  StepStats stats;
  s.lr = scheduled_lr(c, t, plan_.steps);
  s.sgd.set_lr(s.lr);
  if (s.resident) {
    s.algorithm->before_gradient_on_device(t);
    const auto worked_from = Clock::now();
    const std::optional<dp::PrivateGradient> mine = device_gradient(s, t, stats);
    stretch(s, t, worked_from);
    // Exchange and update, on the device.
    trace::Span update(in_.tracer, "update", "compute");
    const SgdOptions& o = s.sgd.options();
    s.algorithm->apply_on_device(t, mine ? &*mine : nullptr,
                                 {.lr = o.lr, .momentum = o.momentum,
                                  .weight_decay = o.weight_decay, .nesterov = o.nesterov});
    s.host_current = false;
    if (s.ema) s.device->average_step(static_cast<float>(s.ema->decay()));
  } else {
    s.algorithm->before_gradient(t, s.model.params());
    const auto worked_from = Clock::now();
    const dp::PrivateGradient mine = s.device ? *device_gradient(s, t, stats)
                                              : cpu_gradient(s, t, stats);
    stretch(s, t, worked_from);
    // Exchange and update.
    trace::Span update(in_.tracer, "update", "compute");
    s.algorithm->apply(t, mine, s.model.params(), s.sgd);
    if (s.ema) s.ema->update(s.model.params());
  }
  // Account: at the highest rate any peer has now.
  if (s.rates.size() > 1) {
    const std::vector<double>& q = s.rates.back().peer_q;
    plan_.charge_at(*std::max_element(q.begin(), q.end()), s.accountant, s.message_accountant);
  } else {
    plan_.charge(s.accountant, s.message_accountant);
  }

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

}  // namespace dpg::train
