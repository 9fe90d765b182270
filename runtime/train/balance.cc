#include "runtime/train/balance.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>

#include "dp/mechanism.h"
#include "runtime/core/error.h"
#include "runtime/core/wire.h"
#include "runtime/train/gradient.h"

namespace dpg::train {

struct SpeedProbe::State {
  model::MlpSpec spec;
  model::Mlp model;
  model::Workspace ws;
  std::vector<std::int32_t> labels;
  dp::GaussianMechanism mechanism;
  StepBuffers buffers;
  std::optional<Straggler> straggler;
  State(const TrainConfig& c, const model::MlpSpec& sp, std::size_t rows)
      : spec(sp), model(sp, 1),
        mechanism(model.num_params(),
                  {.enabled = c.dp,
                   .clip_norm = static_cast<float>(c.clip_norm),
                   .noise_multiplier = 1.0,
                   .expected_batch = static_cast<double>(rows)},
                  1, 0) {}
};

SpeedProbe::SpeedProbe(const TrainConfig& c, const model::MlpSpec& spec, std::size_t rows,
                       const Straggler* straggler)
    : s_(std::make_unique<State>(c, spec, rows)) {
  if (rows == 0) fail(Code::invalid_argument, "SpeedProbe: no work to time");
  s_->ws.resize(spec, rows);
  // Synthetic inputs: a fixed pattern, so that no example is degenerate and nothing is private.
  std::span<float> x = s_->ws.input();
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 101.0f;
  s_->labels.resize(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    s_->labels[i] = static_cast<std::int32_t>(i % static_cast<std::size_t>(spec.classes));
  }
  if (straggler) s_->straggler.emplace(*straggler);
}

SpeedProbe::~SpeedProbe() = default;

double SpeedProbe::pass() {
  StepStats stats;
  const auto t0 = std::chrono::steady_clock::now();
  (void)private_gradient(s_->model, s_->ws, s_->labels, s_->mechanism, s_->buffers, stats);
  if (s_->straggler) {
    s_->straggler->stretch(0, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now() - t0));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<double> all_speeds(collective::Communicator& comm, double mine) {
  std::vector<double> speeds(static_cast<std::size_t>(comm.world()), 0.0);
  speeds[static_cast<std::size_t>(comm.rank())] = mine;
  comm.allreduce(public_value(std::span<double>(speeds)));  // timings of synthetic work
  return speeds;
}

std::vector<double> shares_of(const std::vector<double>& speeds, double floor) {
  if (speeds.empty()) fail(Code::invalid_argument, "shares_of: no peers");
  const double even = 1.0 / static_cast<double>(speeds.size());
  double total = 0;
  for (double s : speeds) {
    if (!std::isfinite(s) || s <= 0) fail(Code::invalid_argument, "shares_of: a speed is not positive");
    total += s;
  }
  std::vector<double> shares;
  double sum = 0;
  for (double s : speeds) {
    shares.push_back(std::max(s / total, floor * even));
    sum += shares.back();
  }
  for (double& s : shares) s /= sum;
  return shares;
}

std::vector<double> cap_shares(std::vector<double> shares, const std::vector<double>& rows,
                               double batch, double cap) {
  const std::size_t n = shares.size();
  if (n == 0 || rows.size() != n) fail(Code::invalid_argument, "cap_shares: a share per peer");
  double room = 0;
  for (double r : rows) room += cap * r;
  if (!(room >= batch * (1 - 1e-12))) {
    fail(Code::invalid_argument, "cap_shares: at the rate cap " + std::to_string(cap) +
                                     " the peers' rows hold " + std::to_string(room) +
                                     " expected examples, under the batch of " +
                                     std::to_string(batch));
  }
  // Water-filling: fix the peers whose share passes their cap at the cap, and spread what the
  // others must take in proportion to their shares; at most n rounds (one peer fixed in each).
  std::vector<bool> fixed(n, false);
  for (std::size_t round = 0; round <= n; ++round) {
    double free_total = 0, left = 1;
    for (std::size_t j = 0; j < n; ++j) {
      if (fixed[j]) left -= cap * rows[j] / batch;
      else free_total += shares[j];
    }
    bool changed = false;
    for (std::size_t j = 0; j < n; ++j) {
      if (fixed[j]) continue;
      shares[j] = free_total > 0 ? shares[j] * left / free_total : 0;
      if (shares[j] * batch > cap * rows[j] * (1 + 1e-12)) {
        fixed[j] = changed = true;
      }
    }
    for (std::size_t j = 0; j < n; ++j) {
      if (fixed[j]) shares[j] = cap * rows[j] / batch;
    }
    if (!changed) break;
  }
  return shares;
}

std::vector<std::size_t> row_counts(std::size_t total, const std::vector<double>& shares) {
  const std::size_t n = shares.size();
  if (n == 0 || total < n) fail(Code::invalid_argument, "row_counts: fewer rows than peers");
  std::vector<std::size_t> counts(n, 1);
  std::size_t left = total - n;
  std::vector<double> remainder(n);
  std::size_t given = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const double want = shares[j] * static_cast<double>(left);
    const auto whole = static_cast<std::size_t>(std::floor(want));
    counts[j] += whole;
    given += whole;
    remainder[j] = want - static_cast<double>(whole);
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return remainder[a] > remainder[b]; });
  for (std::size_t k = 0; given < left; ++k, ++given) ++counts[order[k % n]];
  return counts;
}

}  // namespace dpg::train
