// The factories of the algorithms in the table of algorithm.cc, one per algo_*.cc file.
#pragma once

#include <memory>
#include <vector>

#include "runtime/train/algorithm.h"

namespace dpg::train {

std::unique_ptr<Algorithm> make_single(const AlgoSetup& setup);     // algo_basic.cc
std::unique_ptr<Algorithm> make_allreduce(const AlgoSetup& setup);  // algo_basic.cc
std::unique_ptr<Algorithm> make_gossip(const AlgoSetup& setup);     // algo_gossip.cc
std::unique_ptr<Algorithm> make_local_sgd(const AlgoSetup& setup);  // algo_local_sgd.cc
std::unique_ptr<Algorithm> make_ps_sync(const AlgoSetup& setup);    // algo_ps_sync.cc
std::unique_ptr<Algorithm> make_ps_async(const AlgoSetup& setup);   // algo_ps_async.cc
std::unique_ptr<Algorithm> make_ad_psgd(const AlgoSetup& setup);    // algo_ad_psgd.cc

// ad-psgd's roles on the run's graph: per rank 0 (active: initiates the averagings) or 1
// (passive: answers them), a 2-colouring by BFS from rank 0, the same on every peer. Throws
// invalid_argument naming the graph unless there is exactly one phase and its graph is bipartite.
std::vector<int> ad_psgd_roles(const std::vector<GossipPhase>& phases, int rank);

}  // namespace dpg::train
