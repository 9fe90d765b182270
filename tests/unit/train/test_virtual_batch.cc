// Virtual batches (runtime/train/gradient.h): a logical batch processed in physical pieces gives
// the one-shot step's private gradient, up to float summation order, and on the integer grid of
// secure aggregation bit for bit; its counts are the one-shot step's; the workspace holds one
// piece at a time.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "dp/mechanism.h"
#include "runtime/core/rng.h"
#include "runtime/model/mlp.h"
#include "runtime/train/gradient.h"

namespace {

using namespace dpg;

constexpr std::size_t kRows = 103;

model::MlpSpec spec() { return {12, {16, 8}, 4, model::Activation::tanh}; }

struct Batch {
  std::vector<float> x;
  std::vector<std::int32_t> labels;
};

// A batch whose row 41 is non-finite (its example is dropped, in whichever piece it falls).
Batch make_batch() {
  Rng rng(17);
  Batch b;
  for (std::size_t i = 0; i < kRows; ++i) {
    b.labels.push_back(static_cast<std::int32_t>(rng.below(4)));
    for (int j = 0; j < 12; ++j) b.x.push_back(static_cast<float>(2 * rng.normal()));
  }
  b.x[41 * 12 + 3] = std::numeric_limits<float>::quiet_NaN();
  return b;
}

struct Result {
  std::vector<float> values;
  train::StepStats stats;
  std::size_t capacity = 0;  // the rows the workspace was sized for
};

// One step over the batch in pieces of at most `per` rows (0: one-shot), with a sink when asked.
Result run(const model::Mlp& m, const Batch& b, const dp::MechanismOptions& o, std::size_t per,
           bool with_sink) {
  dp::GaussianMechanism mech(m.num_params(), o, 9, 0);
  model::Workspace ws;
  std::vector<std::int32_t> labels;
  auto load = [&](std::size_t k, model::Workspace& w) -> std::span<const std::int32_t> {
    const std::size_t first = k * per, n = std::min(per, kRows - first);
    w.resize(m.spec(), n);
    std::copy_n(b.x.begin() + static_cast<long>(first * 12), n * 12, w.act[0].begin());
    labels.assign(b.labels.begin() + static_cast<long>(first),
                  b.labels.begin() + static_cast<long>(first + n));
    return labels;
  };
  train::StepBuffers buffers;
  Result r;
  r.values.assign(m.num_params(), 0.0f);
  train::GradientSink sink;
  if (with_sink) {
    sink = [&](const dp::PrivateGradient& part, std::size_t offset) {
      std::copy(part.values().begin(), part.values().end(), r.values.begin() + static_cast<long>(offset));
    };
  }
  auto keep = [&](const dp::PrivateGradient& g) {
    if (!with_sink) r.values.assign(g.values().begin(), g.values().end());
  };
  if (per == 0) {
    ws.resize(m.spec(), kRows);
    std::copy(b.x.begin(), b.x.end(), ws.act[0].begin());
    keep(train::private_gradient(m, ws, b.labels, mech, buffers, r.stats, sink, 100));
  } else {
    const std::size_t pieces = (kRows + per - 1) / per;
    keep(train::private_gradient(m, ws, {}, pieces, load, mech, buffers, r.stats, sink, 100));
  }
  r.capacity = ws.capacity;
  return r;
}

void same_counts(const train::StepStats& a, const train::StepStats& b) {
  CHECK(a.batch == b.batch);
  CHECK(a.correct == b.correct);
  CHECK(a.dropped == b.dropped);
  CHECK(a.clipped == b.clipped);
  CHECK(a.loss_sum == doctest::Approx(b.loss_sum).epsilon(1e-6));
}

}  // namespace

TEST_CASE("virtual batches: pieces give the one-shot step, noise added once") {
  const model::Mlp m(spec(), 3);
  const Batch b = make_batch();
  // Clipping binds; the noise is the same key's in both (it depends on the step, not the rows).
  const dp::MechanismOptions o{.enabled = true, .clip_norm = 0.5f, .noise_multiplier = 0.7,
                               .expected_batch = 100.0};
  for (bool with_sink : {false, true}) {
    const Result whole = run(m, b, o, 0, with_sink);
    CHECK(whole.stats.dropped == 1);
    for (std::size_t per : {1u, 7u, 41u, 64u, 102u, 103u, 500u}) {
      CAPTURE(with_sink);
      CAPTURE(per);
      const Result pieces = run(m, b, o, per, with_sink);
      same_counts(pieces.stats, whole.stats);
      std::size_t off = 0;
      for (std::size_t i = 0; i < whole.values.size(); ++i) {
        off += std::abs(pieces.values[i] - whole.values[i]) >
                       1e-5f * (1.0f + std::abs(whole.values[i]))
                   ? 1
                   : 0;
      }
      CHECK(off == 0);
      CHECK(pieces.capacity <= std::max<std::size_t>(std::min(per, kRows) * 9 / 8, 16));
    }
  }
}

TEST_CASE("virtual batches: on the integer grid the pieces give the one-shot sum bit for bit") {
  const model::Mlp m(spec(), 4);
  const Batch b = make_batch();
  dp::MechanismOptions o;
  o.clip_norm = 0.5f;
  o.noise_multiplier = 1.0;
  o.expected_batch = 1.0;
  o.secure_aggregation = true;  // sums on the grid; no noise, so the exact sum is released
  o.grid_scale = 65536.0;
  o.skellam_mu = 0;
  const Result whole = run(m, b, o, 0, false);
  for (std::size_t per : {1u, 5u, 50u, 103u}) {
    CAPTURE(per);
    const Result pieces = run(m, b, o, per, false);
    same_counts(pieces.stats, whole.stats);
    CHECK(pieces.values == whole.values);
  }
}

TEST_CASE("virtual batches: an empty batch in pieces is the noise alone, as one-shot") {
  const model::Mlp m(spec(), 5);
  const dp::MechanismOptions o{.enabled = true, .clip_norm = 1.0f, .noise_multiplier = 1.0,
                               .expected_batch = 10.0};
  dp::GaussianMechanism a(m.num_params(), o, 9, 0), c(m.num_params(), o, 9, 0);
  model::Workspace wa, wc;
  wa.resize(m.spec(), 0);
  train::StepBuffers buffers;
  train::StepStats sa, sc;
  const auto one = train::private_gradient(m, wa, {}, a, buffers, sa);
  const auto load = [&](std::size_t, model::Workspace& w) -> std::span<const std::int32_t> {
    w.resize(m.spec(), 0);
    return {};
  };
  const auto two = train::private_gradient(m, wc, {}, 2, load, c, buffers, sc);
  CHECK(sc.batch == 0);
  CHECK(std::equal(one.values().begin(), one.values().end(), two.values().begin()));
}
