#include "runtime/train/sampler.h"

#include <cmath>
#include <numeric>

#include "runtime/core/error.h"

namespace dpg::train {

PoissonSampler::PoissonSampler(std::size_t n, double q, Rng rng)
    : n_(n), q_(q), log1m_q_(std::log1p(-q)), rng_(rng) {
  if (!(q > 0.0 && q <= 1.0)) {
    fail(Code::invalid_argument, "sample rate must be in (0, 1], got " + std::to_string(q));
  }
}

const std::vector<std::size_t>& PoissonSampler::next() {
  batch_.clear();
  if (q_ >= 1.0) {
    batch_.resize(n_);
    std::iota(batch_.begin(), batch_.end(), std::size_t{0});
    return batch_;
  }
  // Skip ahead by geometric gaps: the same law as one Bernoulli(q) per example, in O(batch).
  double pos = -1.0;
  for (;;) {
    pos += 1.0 + std::floor(std::log(rng_.uniform_open()) / log1m_q_);
    if (pos >= static_cast<double>(n_)) break;
    batch_.push_back(static_cast<std::size_t>(pos));
  }
  return batch_;
}

ShuffleSampler::ShuffleSampler(std::size_t n, std::size_t batch, Rng rng)
    : order_(n), batch_size_(batch), pos_(n), rng_(rng) {
  if (n == 0 || batch == 0) fail(Code::invalid_argument, "shuffle sampler needs data and a batch");
  std::iota(order_.begin(), order_.end(), std::size_t{0});
}

void ShuffleSampler::restore(const Rng::State& s, std::span<const std::size_t> order,
                             std::size_t pos) {
  std::vector<bool> seen(order_.size(), false);
  bool ok = order.size() == order_.size() && pos <= order.size();
  for (std::size_t i = 0; ok && i < order.size(); ++i) {
    ok = order[i] < seen.size() && !seen[order[i]];
    if (ok) seen[order[i]] = true;
  }
  if (!ok) {
    fail(Code::data_loss, "shuffle sampler: the saved order is not a permutation of the " +
                              std::to_string(order_.size()) + " rows of this shard");
  }
  rng_ = Rng::from_state(s);
  order_.assign(order.begin(), order.end());
  pos_ = pos;
}

const std::vector<std::size_t>& ShuffleSampler::next() {
  batch_.clear();
  for (std::size_t i = 0; i < batch_size_; ++i) {
    if (pos_ == order_.size()) {
      rng_.shuffle(std::span<std::size_t>(order_));
      pos_ = 0;
    }
    batch_.push_back(order_[pos_++]);
  }
  return batch_;
}

}  // namespace dpg::train
