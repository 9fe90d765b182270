// What the algorithms' files share beyond algorithm.h.
#pragma once

#include <memory>
#include <vector>

#include "runtime/train/algorithm.h"

namespace dpg::train {

// ad-psgd's roles on the run's graph: per rank 0 (active: initiates the averagings) or 1
// (passive: answers them), a 2-colouring by BFS from rank 0, the same on every peer. Throws
// invalid_argument naming the graph unless there is exactly one phase and its graph is bipartite.
std::vector<int> ad_psgd_roles(const std::vector<GossipPhase>& phases, int rank);

}  // namespace dpg::train
