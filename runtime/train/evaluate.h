// Evaluation shared by the peers of a run: each peer scores a slice of the test split and the
// counts are summed, or each scores its own model and the scores are gathered. The slices are
// even, or in proportion to the load balancer's shares (public speeds), so that a slow peer
// scores few rows and the others do not wait on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/collective/communicator.h"
#include "runtime/data/dataset.h"
#include "runtime/model/mlp.h"

namespace dpg::train {

class Evaluator {
 public:
  // `comm` (null alone) and `test` must outlive the evaluator. `shares`: each peer's share of
  // the work in rank order (the same on every peer, summing to 1), or empty for even slices.
  Evaluator(const data::Dataset& test, collective::Communicator* comm,
            std::vector<double> shares = {});

  // `m` (the same on every peer) on the first `rows` test rows (all by default), each peer taking
  // a slice; the result is the whole, on every peer.
  model::Mlp::Evaluation shared(const model::Mlp& m, model::Workspace& ws,
                                std::size_t rows = SIZE_MAX) const;
  // This peer's own `m` on the first `rows` test rows; every peer's (accuracy, mean loss) in
  // rank order, on every peer.
  void per_peer(const model::Mlp& m, model::Workspace& ws, std::size_t rows,
                std::vector<double>& accuracy, std::vector<double>& loss) const;
  // Sums `values` over the peers in place (nothing to do alone).
  void sum(std::span<double> values) const;

  int rank() const { return comm_ ? comm_->rank() : 0; }
  int world() const { return comm_ ? comm_->world() : 1; }
  std::size_t rows() const { return test_.rows; }
  // Where peer `r`'s slice of `rows` rows begins (slice_begin(world(), rows) == rows).
  std::size_t slice_begin(int r, std::size_t rows) const;

 private:
  const data::Dataset& test_;
  collective::Communicator* comm_;
  std::vector<double> bounds_;  // bounds_[r]: the shares of the peers before r (empty: even)
};

// Accuracy and mean loss of an evaluation (0 for no rows).
inline double accuracy_of(const model::Mlp::Evaluation& e) {
  return e.rows > 0 ? static_cast<double>(e.correct) / static_cast<double>(e.rows) : 0.0;
}
inline double loss_of(const model::Mlp::Evaluation& e) {
  return e.rows > 0 ? e.loss_sum / static_cast<double>(e.rows) : 0.0;
}

}  // namespace dpg::train
