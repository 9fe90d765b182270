#include "runtime/train/gradient.h"

#include "dp/clip.h"

namespace dpg::train {

dp::PrivateGradient private_gradient(const model::Mlp& model, model::Workspace& ws,
                                     std::span<const std::int32_t> labels,
                                     dp::GaussianMechanism& mechanism, StepBuffers& buffers,
                                     StepStats& stats, trace::Tracer* tracer) {
  const std::size_t batch = ws.batch;
  stats = StepStats{};
  stats.batch = batch;
  std::span<float> sum = mechanism.begin_step();
  if (batch > 0) {
    trace::Span pass(tracer, "forward_backward", "compute");
    model.forward(ws);
    stats.correct = model.loss_and_backward(labels, ws, true);
    for (std::size_t i = 0; i < batch; ++i) stats.loss_sum += ws.loss[i];
    pass.end();
    trace::Span clip(tracer, "clip", "compute");
    if (mechanism.options().enabled) {
      std::vector<float>& sq_norms = buffers.sq_norms;
      std::vector<float>& scale = buffers.scale;
      sq_norms.resize(batch);
      scale.resize(batch);
      model.per_example_sq_norms(ws, sq_norms);
      stats.dropped = dp::clip_factors(sq_norms, mechanism.options().clip_norm, scale);
      stats.loss_sum = 0.0;  // over the examples kept: a dropped one may have a non-finite loss
      for (std::size_t i = 0; i < batch; ++i) {
        stats.clipped += (scale[i] < 1.0f && scale[i] > 0.0f) ? 1 : 0;
        if (scale[i] != 0.0f) stats.loss_sum += ws.loss[i];
      }
      model.accumulate_gradient(ws, scale, sum);
    } else {
      model.accumulate_gradient(ws, {}, sum);
    }
  }
  trace::Span noise(tracer, "noise", "compute");
  return mechanism.release();
}

}  // namespace dpg::train
