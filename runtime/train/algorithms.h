// The factories of the algorithms in the table of algorithm.cc, one per algo_*.cc file.
#pragma once

#include <memory>

#include "runtime/train/algorithm.h"

namespace dpg::train {

std::unique_ptr<Algorithm> make_single(const AlgoSetup& setup);     // algo_basic.cc
std::unique_ptr<Algorithm> make_allreduce(const AlgoSetup& setup);  // algo_basic.cc
std::unique_ptr<Algorithm> make_gossip(const AlgoSetup& setup);     // algo_gossip.cc
std::unique_ptr<Algorithm> make_ps_sync(const AlgoSetup& setup);    // algo_ps_sync.cc
std::unique_ptr<Algorithm> make_ps_async(const AlgoSetup& setup);   // algo_ps_async.cc

}  // namespace dpg::train
