// Evaluation shared by the peers of a run: each peer scores a slice of the test split and the
// counts are summed, or each scores its own model and the scores are gathered.
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
  // `comm` (null alone) and `test` must outlive the evaluator.
  Evaluator(const data::Dataset& test, collective::Communicator* comm);

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

 private:
  const data::Dataset& test_;
  collective::Communicator* comm_;
};

// Accuracy and mean loss of an evaluation (0 for no rows).
inline double accuracy_of(const model::Mlp::Evaluation& e) {
  return e.rows > 0 ? static_cast<double>(e.correct) / static_cast<double>(e.rows) : 0.0;
}
inline double loss_of(const model::Mlp::Evaluation& e) {
  return e.rows > 0 ? e.loss_sum / static_cast<double>(e.rows) : 0.0;
}

}  // namespace dpg::train
