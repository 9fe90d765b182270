// What one local peer of a `train` command needs, estimated before `launch` starts it: the
// launcher's memory check (docs/LIMITS.md), checked against measured peaks in docs/BENCHMARKS.md
// ("A peer's memory").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/train_config.h"

namespace dpg::app {

struct PeerShape {
  std::uint64_t train_rows = 0;  // the training rows this peer keeps
  std::uint64_t eval_rows = 0;   // the test and validation rows every peer holds
  std::uint64_t cols = 0;
  std::uint64_t classes = 10;
  double batch = 4096;           // the expected batch (--batch-size)
  std::vector<int> hidden = {256};
  bool distributed_plan = false;  // a summed release with distributed noise under the PLD
  double pass_rows = 0;  // virtual batches: the most rows a pass holds (0: the whole batch)
};

// The peer's bytes at its peak: the process itself (its private memory, and its share of the
// program's and libraries' pages among `local_peers`), the rows it keeps, the model's copies and
// the step's buffers for a batch of twice the expected size.
std::uint64_t estimate_peer_bytes(const PeerShape& shape, int local_peers);

// The model's copies and the step's buffers alone: kModelCopies copies of the parameters of an MLP
// of `hidden` widths on `cols` features and `classes` classes, and the buffers of a Poisson batch
// sized for twice its expected `batch` (the inputs, and per layer its outputs, their gradients and
// one more), or of `pass_rows` rows where that is fewer (virtual batches: --physical-batch,
// --batch-memory). In doubles, saturating: a hostile size is a large figure, never a wrapped one.
double model_and_step_bytes(double cols, double classes, const std::vector<int>& hidden,
                            double batch, double pass_rows = 0);

// The rows one pass holds under virtual batches (train::physical_rows: c's physical_batch and
// batch_memory_mib) for c's MLP on `cols` features and `classes` classes; 0: the whole batch.
double pass_rows_for(const TrainConfig& c, std::uint64_t cols, std::uint64_t classes);

// The shape of command `args` (what follows `launch ... --`) for `world` peers: its --data
// folder's manifest (the default folder when not given), --batch-size, --hidden,
// --physical-batch, --batch-memory and what decides
// the plan's noise (--algo, --noise-mode, --accountant, --target, --no-dp); flags given in a
// --config file are not read (its defaults stand). The process alone (no rows, no batch) when the
// command is not `train` or its manifest cannot be read yet (train may prepare it).
PeerShape train_shape(const std::vector<std::string>& args, int world);

}  // namespace dpg::app
