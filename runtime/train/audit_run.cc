#include "runtime/train/audit_run.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <unordered_set>
#include <utility>

#include "dp/clip.h"
#include "runtime/core/error.h"
#include "runtime/core/rng.h"
#include "runtime/model/mlp.h"
#include "runtime/train/run_state.h"
#include "runtime/train/sampler.h"
#include "runtime/train/trainer.h"

namespace dpg::train {
namespace {

// Streams of the audit's generators, apart from every purpose of runtime/core/rng.h.
constexpr std::uint64_t kAuditCanaries = 64;   // the auditor's: which canaries, which included
constexpr std::uint64_t kAuditSampler = 65;    // the run's secret: gradient canaries' batches

// The coordinates of gradient canaries: weights of the first layer, W_0[h][p] at h * cols + p,
// with p = 1, 4, 7, ... so that the neighbours p - 1 and p + 1 are never canaries. Their updates
// are the control: the data move adjacent inputs' weights alike (neighbouring pixels are
// correlated), and subtracting them takes most of that drift out of the score.
struct CanarySlots {
  std::size_t hidden = 0, cols = 0, per_row = 0;
  std::size_t count() const { return hidden * per_row; }
  std::size_t coordinate(std::size_t slot) const {
    return (slot / per_row) * cols + 1 + 3 * (slot % per_row);
  }
};

CanarySlots slots_of(const model::MlpSpec& spec) {
  const std::vector<int> w = spec.widths();
  CanarySlots s;
  s.cols = static_cast<std::size_t>(w[0]);
  s.hidden = static_cast<std::size_t>(w[1]);
  s.per_row = s.cols >= 3 ? (s.cols - 3) / 3 + 1 : 0;  // p = 1 + 3k with p + 1 < cols
  return s;
}

// m distinct slots' coordinates, in the order drawn (m <= count / 2, so rejection is quick).
std::vector<std::size_t> draw_coordinates(long long m, const CanarySlots& slots, Rng& rng) {
  std::vector<std::size_t> out;
  std::unordered_set<std::size_t> taken;
  while (static_cast<long long>(out.size()) < m) {
    const std::size_t slot = rng.below(slots.count());
    if (taken.insert(slot).second) out.push_back(slots.coordinate(slot));
  }
  return out;
}

// Minus each row's loss under `params`: rows (m, cols) with their labels, in chunks.
std::vector<double> minus_losses(const model::MlpSpec& spec, std::span<const float> params,
                                 const std::vector<float>& rows,
                                 const std::vector<std::int32_t>& labels) {
  model::Mlp m(spec, 0);
  std::copy(params.begin(), params.end(), m.params().begin());
  const std::size_t cols = static_cast<std::size_t>(spec.inputs);
  const std::size_t chunk = 1024;
  model::Workspace ws;
  std::vector<double> out;
  out.reserve(labels.size());
  for (std::size_t begin = 0; begin < labels.size(); begin += chunk) {
    const std::size_t n = std::min(chunk, labels.size() - begin);
    ws.resize(spec, n);
    std::copy_n(rows.data() + begin * cols, n * cols, ws.act[0].data());
    m.forward(ws);
    m.loss_and_backward(std::span<const std::int32_t>(labels.data() + begin, n), ws, false);
    for (std::size_t i = 0; i < n; ++i) out.push_back(-static_cast<double>(ws.loss[i]));
  }
  return out;
}

// The sum hook of gradient canaries: each included canary joins step t by its own Poisson draw
// at rate q, is clipped to C as an example is, and lands in the step's clipped sum.
class GradientCanaries {
 public:
  GradientCanaries(std::vector<std::size_t> coords, double q, float clip_norm, bool clip,
                   std::uint64_t secret)
      : coords_(std::move(coords)),
        sampler_(coords_.size(), q, Rng(secret, stream_for(kAuditSampler, 0))),
        clip_norm_(clip_norm),
        clip_(clip) {}

  void add(std::span<float> sum) {
    const std::vector<std::size_t>& batch = sampler_.next();
    // A Dirac canary C e_c has squared norm C^2: the clip factor is 1 (up to rounding), but it
    // is the mechanism's own function that says so.
    sq_norms_.assign(batch.size(), clip_norm_ * clip_norm_);
    scale_.assign(batch.size(), 1.0f);
    if (clip_) dp::clip_factors(sq_norms_, clip_norm_, scale_);
    for (std::size_t i = 0; i < batch.size(); ++i) sum[coords_[batch[i]]] += clip_norm_ * scale_[i];
  }

 private:
  std::vector<std::size_t> coords_;
  PoissonSampler sampler_;
  float clip_norm_;
  bool clip_;
  std::vector<float> sq_norms_, scale_;
};

}  // namespace

std::string to_string(CanaryKind kind) {
  return kind == CanaryKind::gradient ? "gradient" : "input";
}

CanaryKind parse_canary_kind(const std::string& text) {
  if (text == "gradient") return CanaryKind::gradient;
  if (text == "input") return CanaryKind::input;
  fail(Code::invalid_argument, "--canary: expected gradient or input, got \"" + text + "\"");
}

void check_audit(const TrainConfig& c, const AuditOptions& o) {
  auto bad = [](const std::string& m) { fail(Code::invalid_argument, m); };
  if (c.algo != Algo::single) bad("--algo: the audit trains one peer (single)");
  if (c.sampling != Sampling::poisson) bad("--sampling: the audit needs poisson");
  if (o.canaries < 2) bad("--canaries: must be >= 2, got " + std::to_string(o.canaries));
  if (o.canaries > 1000000) {
    bad("--canaries: at most 1000000, got " + std::to_string(o.canaries));
  }
  if (o.k_plus < 0) bad("--k-plus: must be >= 0, got " + std::to_string(o.k_plus));
  if (o.k_minus < 0) bad("--k-minus: must be >= 0, got " + std::to_string(o.k_minus));
  if (o.k_plus + o.k_minus < 1 || o.k_plus + o.k_minus > o.canaries) {
    bad("--guesses: k+ + k- must be in [1, --canaries = " + std::to_string(o.canaries) +
        "], got " + std::to_string(o.k_plus) + " + " + std::to_string(o.k_minus));
  }
  if (!(o.confidence > 0 && o.confidence < 1)) {
    bad("--confidence: must be in (0, 1), got " + std::to_string(o.confidence));
  }
}

namespace {

// Input canaries: `included.size()` images drawn uniformly in the training features' range, each
// with a uniform label; the included ones join the training set.
void draw_inputs(Rng& auditor, const std::vector<std::uint8_t>& included, data::Dataset& train,
                 std::vector<float>& images, std::vector<std::int32_t>& labels) {
  const std::size_t m = included.size();
  const auto [lo, hi] = std::minmax_element(train.features.begin(), train.features.end());
  const float low = *lo, span = *hi - *lo;
  const std::size_t cols = train.cols;
  images.resize(m * cols);
  labels.resize(m);
  for (std::size_t j = 0; j < m; ++j) {
    for (std::size_t k = 0; k < cols; ++k) {
      images[j * cols + k] = low + static_cast<float>(auditor.uniform()) * span;
    }
    labels[j] =
        static_cast<std::int32_t>(auditor.below(static_cast<std::uint64_t>(train.num_classes)));
  }
  for (std::size_t j = 0; j < m; ++j) {
    if (!included[j]) continue;
    train.features.insert(train.features.end(),
                          images.begin() + static_cast<std::ptrdiff_t>(j * cols),
                          images.begin() + static_cast<std::ptrdiff_t>((j + 1) * cols));
    train.labels.push_back(labels[j]);
    ++train.rows;
  }
}

// The auditor's side once training is over: the scores' means, its guesses from them and the
// lower bound on epsilon those guesses prove.
void guess(AuditResult& r, std::vector<double> scores, const std::vector<std::uint8_t>& included,
           double delta, const AuditOptions& o) {
  for (double& s : scores) {
    if (std::isnan(s)) {
      fail(Code::aborted, "audit: a canary's score is NaN (the model diverged; lower --lr)");
    }
    // An infinite loss is the lowest score there is.
    s = std::clamp(s, -std::numeric_limits<double>::max(), std::numeric_limits<double>::max());
  }
  double sum_in = 0, sum_out = 0;
  for (std::size_t j = 0; j < scores.size(); ++j) (included[j] ? sum_in : sum_out) += scores[j];
  r.mean_score_in = r.included > 0 ? sum_in / static_cast<double>(r.included) : 0.0;
  r.mean_score_out =
      r.included < r.canaries ? sum_out / static_cast<double>(r.canaries - r.included) : 0.0;
  const dp::AuditGuesses g = dp::audit_guess(scores, included, o.k_plus, o.k_minus);
  r.guesses = g.guesses;
  r.correct = g.correct;
  r.epsilon_lower_bound =
      dp::audit_epsilon_lower_bound(r.canaries, r.guesses, r.correct, delta, o.confidence);
}

}  // namespace

AuditResult run_audit(const TrainConfig& c, data::Prepared data, const AuditOptions& o) {
  check_audit(c, o);
  const auto m = static_cast<std::size_t>(o.canaries);
  const model::MlpSpec spec = spec_for(c, data.train);
  const CanarySlots slots = slots_of(spec);
  if (o.kind == CanaryKind::gradient && m > slots.count() / 2) {
    fail(Code::invalid_argument,
         "--canaries: gradient canaries take a first-layer weight each, at most " +
             std::to_string(slots.count() / 2) + " with this model, got " + std::to_string(m));
  }
  Rng auditor(o.seed, stream_for(kAuditCanaries, 0));
  std::vector<std::uint8_t> included(m);
  for (auto& b : included) b = auditor.uniform() < 0.5 ? 1 : 0;
  AuditResult r;
  r.canaries = o.canaries;
  for (auto b : included) r.included += b;

  // The canaries themselves, drawn before training from the auditor's coins only.
  std::vector<std::size_t> coords;
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  if (o.kind == CanaryKind::gradient) {
    coords = draw_coordinates(o.canaries, slots, auditor);
  } else {
    draw_inputs(auditor, included, data.train, images, labels);
  }

  RunInputs in;
  in.config = c;
  in.data = std::move(data);
  std::vector<float> initial;  // gradient canaries: their coordinates before the first step
  std::optional<GradientCanaries> hook;  // made once the plan fixes the sampling rate
  std::vector<std::size_t> in_coords;
  if (o.kind == CanaryKind::gradient) {
    for (std::size_t j = 0; j < m; ++j) {
      if (included[j]) in_coords.push_back(coords[j]);
    }
    in.hooks.sum = [&](long long, std::span<float> sum) { hook->add(sum); };
    in.hooks.step = [&](long long t, std::span<const float> p) {
      if (t != 0) return;
      initial.resize(3 * m);
      for (std::size_t j = 0; j < m; ++j) {
        for (std::size_t k = 0; k < 3; ++k) initial[3 * j + k] = p[coords[j] + k - 1];
      }
    };
  }
  Trainer trainer(std::move(in));
  if (o.kind == CanaryKind::gradient) {
    hook.emplace(std::move(in_coords), trainer.plan().accountant_q(),
                 static_cast<float>(c.clip_norm), c.dp,
                 c.noise_seed != 0 ? c.noise_seed : secret_seed());
  }
  r.summary = trainer.run([](const EpochReport&) {});
  r.sample_rate = trainer.plan().accountant_q();
  r.noise_multiplier = trainer.plan().model_sigma;
  r.steps = trainer.total_steps();

  const std::span<const float> final_params = trainer.params();
  std::vector<double> scores(m);
  if (o.kind == CanaryKind::gradient) {
    // Minus the canary's total update, less the mean of its two neighbours'.
    auto down = [&](std::size_t j, std::size_t k) {
      return static_cast<double>(initial[3 * j + k]) -
             static_cast<double>(final_params[coords[j] + k - 1]);
    };
    for (std::size_t j = 0; j < m; ++j) {
      scores[j] = down(j, 1) - 0.5 * (down(j, 0) + down(j, 2));
    }
  } else {
    scores = minus_losses(spec, final_params, images, labels);
  }
  guess(r, std::move(scores), included, c.delta, o);
  return r;
}

}  // namespace dpg::train
