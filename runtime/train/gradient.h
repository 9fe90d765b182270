// The gradient half of a training step, shared by the trainer and the step benchmark: forward,
// backward with per-example norms, clipping, and the Gaussian mechanism.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "dp/mechanism.h"
#include "runtime/core/trace.h"
#include "runtime/model/mlp.h"

namespace dpg::train {

struct StepStats {
  std::size_t batch = 0;        // realised batch size
  double loss_sum = 0.0;        // sum of per-example losses (of the kept examples under DP)
  std::size_t correct = 0;      // correct predictions in the batch (before the update)
  std::size_t dropped = 0;      // examples with a non-finite gradient, left out of the sum
  std::size_t clipped = 0;      // examples whose gradient norm exceeded C
};

// Per-step scratch for the clipping, reused from step to step.
struct StepBuffers {
  std::vector<float> sq_norms;  // (batch)
  std::vector<float> scale;     // (batch)
};

// Takes each released part of the gradient as soon as it is ready: values [offset, offset +
// part.size()) of the whole, from the end of the vector down (last layer first; in a layer its
// bias, then its weight rows from the last).
using GradientSink = std::function<void(const dp::PrivateGradient& part, std::size_t offset)>;

// Sees the step's whole clipped sum (num_params) just before the noise, and may add to it: what
// it adds is noised and released like the examples' share (the audit's gradient canaries,
// runtime/train/audit_run.h). Not with a sink, which releases the sum before it is whole. Under
// secure noise the examples are summed on the mechanism's grid, so the span holds zeros, and what
// the hook adds is rounded onto the grid at the release.
using SumHook = std::function<void(std::span<float> sum)>;

// The pieces a streamed gradient is released in, in order: for each layer from the last, its
// bias, then its weight rows in blocks of about part_values values (0: the whole matrix), from
// the last row. Every peer cuts the same pieces from the layer sizes alone, whichever device
// computed its gradient, so that a bucketed all-reduce forms the same buckets everywhere.
struct ReleasePiece {
  int layer = 0;
  bool bias = false;
  int row_begin = 0, row_end = 0;                // weight rows (bias: all of the layer's)
  std::pair<std::size_t, std::size_t> range;     // values [first, second) of the gradient
};
std::vector<ReleasePiece> release_pieces(const model::Mlp& model, std::size_t part_values);

// ws.act[0] holds the batch (ws.batch rows); labels has ws.batch entries. With the mechanism
// enabled each example's gradient is clipped to C before the sum; the sum is noised once.
// With a sink, the clipped sum is made piece by piece from the end (the per-example norms, which
// need every layer, come first, from the backward pass's per-layer activations and output
// gradients), and each piece is noised and handed to the sink at once: a layer's bias, then its
// weights in blocks of whole rows of about part_values values (0: the whole matrix), so that a
// large layer goes out in pieces while the rest of it is summed. The values returned are the
// same up to float summation order (a block of rows is its own matrix product). `tracer`
// (optional) records the forward_backward, clip and noise spans. `before_noise` (optional, not
// with a sink) is called with the clipped sum before release().
dp::PrivateGradient private_gradient(const model::Mlp& model, model::Workspace& ws,
                                     std::span<const std::int32_t> labels,
                                     dp::GaussianMechanism& mechanism, StepBuffers& buffers,
                                     StepStats& stats, const GradientSink& sink = {},
                                     std::size_t part_values = 0,
                                     trace::Tracer* tracer = nullptr,
                                     const SumHook& before_noise = {});

// Virtual batches: one logical batch processed as `pieces` physical ones, so that the workspace
// holds one piece at a time. load(k, ws) fills the workspace with piece k's rows (ws.resize,
// then ws.act[0]) and returns their labels, for k = 0 .. pieces - 1 in order; `labels` is not
// read. (Without a loader, one piece: the workspace as the caller filled it, with `labels`.) Each piece is forwarded, clipped example by example and added to the one clipped sum;
// the noise is added once, after the last piece, and the stats count every piece. The result is
// the one-shot step's up to float summation order (the same integers on secure noise's grid,
// whose values are row-exact), and a sink gets the whole sum's pieces after the last piece.
using LoadPiece =
    std::function<std::span<const std::int32_t>(std::size_t piece, model::Workspace& ws)>;
dp::PrivateGradient private_gradient(const model::Mlp& model, model::Workspace& ws,
                                     std::span<const std::int32_t> labels, std::size_t pieces,
                                     const LoadPiece& load, dp::GaussianMechanism& mechanism,
                                     StepBuffers& buffers, StepStats& stats,
                                     const GradientSink& sink = {}, std::size_t part_values = 0,
                                     trace::Tracer* tracer = nullptr,
                                     const SumHook& before_noise = {});

}  // namespace dpg::train
