// Which examples a step sees. Poisson sampling (each example joins independently with
// probability q) is what the accountant analyses; fixed-size shuffled batches are an option whose
// epsilon is then only nominal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/core/rng.h"

namespace dpg::train {

class PoissonSampler {
 public:
  PoissonSampler(std::size_t n, double q, Rng rng);
  // Indices of this step's batch, ascending; may be empty.
  const std::vector<std::size_t>& next();
  // The generator, for a checkpoint; a sampler given it back continues the same batches.
  Rng::State rng_state() const { return rng_.state(); }
  void set_rng_state(const Rng::State& s) { rng_ = Rng::from_state(s); }

 private:
  std::size_t n_;
  double q_;
  double log1m_q_;
  Rng rng_;
  std::vector<std::size_t> batch_;
};

class ShuffleSampler {
 public:
  ShuffleSampler(std::size_t n, std::size_t batch, Rng rng);
  const std::vector<std::size_t>& next();
  // The generator, the permutation and the place in it, for a checkpoint.
  Rng::State rng_state() const { return rng_.state(); }
  std::span<const std::size_t> order() const { return order_; }
  std::size_t position() const { return pos_; }
  // Throws data_loss unless `order` is a permutation of the rows and pos at most their count.
  void restore(const Rng::State& s, std::span<const std::size_t> order, std::size_t pos);

 private:
  std::vector<std::size_t> order_;
  std::size_t batch_size_;
  std::size_t pos_;
  Rng rng_;
  std::vector<std::size_t> batch_;
};

}  // namespace dpg::train
