// The factories of the algorithms in the table of algorithm.cc, one per algo_*.cc file.
#pragma once

#include <memory>

#include "runtime/train/algorithm.h"

namespace dpg::train {

std::unique_ptr<Algorithm> make_single(const AlgoSetup& setup);     // algo_basic.cc
std::unique_ptr<Algorithm> make_allreduce(const AlgoSetup& setup);  // algo_basic.cc
std::unique_ptr<Algorithm> make_gossip(const AlgoSetup& setup);     // algo_gossip.cc
std::unique_ptr<Algorithm> make_local_sgd(const AlgoSetup& setup);  // algo_local_sgd.cc

}  // namespace dpg::train
