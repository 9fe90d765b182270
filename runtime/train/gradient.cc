#include "runtime/train/gradient.h"

#include <algorithm>
#include <utility>

#include "dp/clip.h"
#include "runtime/core/error.h"
#include "runtime/model/kernels.h"

namespace dpg::train {

std::vector<ReleasePiece> release_pieces(const model::Mlp& model, std::size_t part_values) {
  const std::vector<int> widths = model.spec().widths();
  std::vector<ReleasePiece> out;
  for (int l = model.num_layers() - 1; l >= 0; --l) {
    const int in = widths[static_cast<std::size_t>(l)];
    const int out_width = widths[static_cast<std::size_t>(l) + 1];
    out.push_back({l, true, 0, out_width, model.bias_range(l)});
    const int rows = part_values == 0
                         ? out_width
                         : static_cast<int>(std::clamp<std::size_t>(
                               part_values / static_cast<std::size_t>(in), 1,
                               static_cast<std::size_t>(out_width)));
    for (int hi = out_width; hi > 0; hi -= rows) {
      const int lo = std::max(0, hi - rows);
      out.push_back({l, false, lo, hi, model.weight_rows(l, lo, hi)});
    }
  }
  return out;
}

namespace {

// Forward, backward, per-example norms and clip factors (into buffers.scale) of the examples in
// ws, with their counts added to `stats`.
void clip_pass(const model::Mlp& model, model::Workspace& ws,
               std::span<const std::int32_t> labels, const dp::GaussianMechanism& mechanism,
               StepBuffers& buffers, StepStats& stats, trace::Tracer* tracer) {
  const std::size_t batch = ws.batch;
  stats.batch += batch;
  if (batch == 0) return;
  trace::Span pass(tracer, "forward_backward", "compute");
  model.forward(ws);
  std::size_t correct = model.loss_and_backward(labels, ws, true);
  double loss_sum = 0.0;
  for (std::size_t i = 0; i < batch; ++i) loss_sum += ws.loss[i];
  pass.end();
  trace::Span clip(tracer, "clip", "compute");
  if (mechanism.options().enabled) {
    std::vector<float>& sq_norms = buffers.sq_norms;
    std::vector<float>& scale = buffers.scale;
    sq_norms.resize(batch);
    scale.resize(batch);
    model.per_example_sq_norms(ws, sq_norms);
    stats.dropped += dp::clip_factors(sq_norms, mechanism.options().clip_norm, scale);
    // The loss and accuracy over the examples kept, as the count of seen examples is: a
    // dropped one may have a non-finite loss, and counted correct it could lift the epoch's
    // accuracy above 100%.
    loss_sum = 0.0;
    const auto classes = static_cast<std::size_t>(model.spec().classes);
    for (std::size_t i = 0; i < batch; ++i) {
      stats.clipped += (scale[i] < 1.0f && scale[i] > 0.0f) ? 1 : 0;
      if (scale[i] != 0.0f) {
        loss_sum += ws.loss[i];
      } else if (model::kernels::argmax(ws.act.back().data() + i * classes, classes) ==
                 static_cast<std::size_t>(labels[i])) {
        --correct;
      }
    }
  }
  stats.correct += correct;
  stats.loss_sum += loss_sum;
}

}  // namespace

dp::PrivateGradient private_gradient(const model::Mlp& model, model::Workspace& ws,
                                     std::span<const std::int32_t> labels,
                                     dp::GaussianMechanism& mechanism, StepBuffers& buffers,
                                     StepStats& stats, const GradientSink& sink,
                                     std::size_t part_values, trace::Tracer* tracer,
                                     const SumHook& before_noise) {
  return private_gradient(model, ws, labels, 1, {}, mechanism, buffers, stats, sink, part_values,
                          tracer, before_noise);
}

dp::PrivateGradient private_gradient(const model::Mlp& model, model::Workspace& ws,
                                     std::span<const std::int32_t> labels, std::size_t pieces,
                                     const LoadPiece& load, dp::GaussianMechanism& mechanism,
                                     StepBuffers& buffers, StepStats& stats,
                                     const GradientSink& sink, std::size_t part_values,
                                     trace::Tracer* tracer, const SumHook& before_noise) {
  if (sink && before_noise) {
    fail(Code::failed_precondition,
         "private_gradient: a sum hook needs the whole sum, and a sink releases it in parts");
  }
  if (pieces == 0 || (pieces > 1 && !load)) {
    fail(Code::failed_precondition,
         "private_gradient: a batch takes at least one piece, and a loader for more than one");
  }
  stats = StepStats{};
  std::span<float> sum = mechanism.begin_step();
  // Secure noise sums the clipped examples on the mechanism's integer grid, and its sensitivity
  // holds only if each example's values are its own whatever the batch: computed row-exact.
  const bool on_grid = mechanism.sums_on_grid();
  const std::span<std::int64_t> grid = on_grid ? mechanism.grid_sum() : std::span<std::int64_t>{};
  const float to_grid = on_grid ? mechanism.to_grid() : 0.0f;
  // The clip factors: none without DP, or for an empty piece, whose sum stays zero.
  auto scale_of = [&](std::size_t rows) {
    return mechanism.options().enabled && rows > 0 ? std::span<const float>(buffers.scale)
                                                   : std::span<const float>{};
  };
  // Every piece but the last: clipped and added to the sum whole (virtual batches).
  for (std::size_t k = 0; k + 1 < pieces; ++k) {
    ws.exact_rows = on_grid;
    const std::span<const std::int32_t> piece_labels = load(k, ws);
    clip_pass(model, ws, piece_labels, mechanism, buffers, stats, tracer);
    trace::Span clipped_sum(tracer, "clip", "compute");
    if (ws.batch == 0) continue;
    if (on_grid) {
      model.accumulate_gradient_on_grid(ws, scale_of(ws.batch), to_grid, grid);
    } else {
      model.accumulate_gradient(ws, scale_of(ws.batch), sum);
    }
  }
  ws.exact_rows = on_grid;
  const std::span<const std::int32_t> last_labels = load ? load(pieces - 1, ws) : labels;
  const std::size_t batch = ws.batch;
  clip_pass(model, ws, last_labels, mechanism, buffers, stats, tracer);
  // The last piece's clipped sum. With a sink, its pieces are noised and handed over as they
  // are done.
  trace::Span clipped_sum(tracer, "clip", "compute");
  const std::span<const float> scale = scale_of(batch);
  if (sink) {
    for (const ReleasePiece& piece : release_pieces(model, part_values)) {
      if (piece.bias) {
        if (batch > 0) model.clip_layer(ws, scale, piece.layer);
        if (on_grid) {
          model.add_bias_on_grid(ws, piece.layer, to_grid, grid);
        } else {
          model.add_bias(ws, piece.layer, sum);
        }
      } else if (on_grid) {
        model.add_weight_rows_on_grid(ws, piece.layer, piece.row_begin, piece.row_end, to_grid,
                                      grid);
      } else {
        model.add_weight_rows(ws, piece.layer, piece.row_begin, piece.row_end, sum);
      }
      sink(mechanism.release_range(piece.range.first, piece.range.second), piece.range.first);
    }
  } else if (on_grid) {
    model.accumulate_gradient_on_grid(ws, scale, to_grid, grid);
    if (before_noise) before_noise(sum);  // into the floats, which the release adds to the grid
  } else {
    model.accumulate_gradient(ws, scale, sum);
    if (before_noise) before_noise(sum);
  }
  clipped_sum.end();
  trace::Span noise(tracer, "noise", "compute");
  return mechanism.release();
}

}  // namespace dpg::train
