#include "runtime/train/evaluate.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/check.h"

namespace dpg::train {

Evaluator::Evaluator(const data::Dataset& test, collective::Communicator* comm,
                     std::vector<double> shares)
    : test_(test), comm_(comm) {
  if (shares.empty()) return;
  DPG_CHECK(static_cast<int>(shares.size()) == world());
  bounds_.push_back(0.0);
  for (double s : shares) bounds_.push_back(bounds_.back() + s);
}

std::size_t Evaluator::slice_begin(int r, std::size_t rows) const {
  const std::size_t n = static_cast<std::size_t>(world()), k = static_cast<std::size_t>(r);
  if (k >= n) return rows;
  if (bounds_.empty()) return rows * k / n;
  // The same doubles on every peer: the slices tile [0, rows) alike everywhere.
  const double at = std::round(static_cast<double>(rows) * bounds_[k] / bounds_.back());
  return std::min(rows, static_cast<std::size_t>(std::max(0.0, at)));
}

void Evaluator::sum(std::span<double> values) const {
  if (comm_) comm_->allreduce(public_value(values), collective::Reduce::sum);
}

model::Mlp::Evaluation Evaluator::shared(const model::Mlp& m, model::Workspace& ws,
                                         std::size_t limit) const {
  const std::size_t rows = std::min(limit, test_.rows), cols = test_.cols;
  const std::size_t begin = slice_begin(rank(), rows), end = slice_begin(rank() + 1, rows);
  const auto ev = m.evaluate(
      std::span<const float>(test_.features).subspan(begin * cols, (end - begin) * cols),
      std::span<const std::int32_t>(test_.labels).subspan(begin, end - begin), ws);
  double sums[3] = {ev.loss_sum, static_cast<double>(ev.correct), static_cast<double>(ev.rows)};
  sum(sums);
  return {sums[0], static_cast<std::size_t>(sums[1]), static_cast<std::size_t>(sums[2])};
}

void Evaluator::per_peer(const model::Mlp& m, model::Workspace& ws, std::size_t rows,
                         std::vector<double>& accuracy, std::vector<double>& loss) const {
  rows = std::min(rows, test_.rows);
  const auto ev = m.evaluate(std::span<const float>(test_.features).first(rows * test_.cols),
                             std::span<const std::int32_t>(test_.labels).first(rows), ws);
  const std::size_t n = static_cast<std::size_t>(world());
  std::vector<double> v(2 * n, 0.0);  // (accuracy, loss) of each peer
  const std::size_t me = static_cast<std::size_t>(rank());
  v[2 * me] = accuracy_of(ev);
  v[2 * me + 1] = loss_of(ev);
  sum(v);
  accuracy.clear();
  loss.clear();
  for (std::size_t j = 0; j < n; ++j) {
    accuracy.push_back(v[2 * j]);
    loss.push_back(v[2 * j + 1]);
  }
}

}  // namespace dpg::train
