// What the two parameter-server algorithms (algo_ps_sync.cc, algo_ps_async.cc) share: how the
// parameters are cut into the servers' shards, and the operation ids of their messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "runtime/net/ops.h"

namespace dpg::train {

// Tag ops of the parameter server (runtime/net/ops.h): a worker's gradient shard going to a
// server, and the updated shard coming back.
using net::kOpPsPull;
using net::kOpPsPush;

// Server s's contiguous range [begin, end) of num_params parameters cut among `servers`: the
// first num_params % servers shards get one more, so sizes differ by at most one.
std::pair<std::size_t, std::size_t> shard_range(std::size_t num_params, int servers, int s);

// The number of servers of a run of `world` peers; throws invalid_argument naming /servers when
// config.servers exceeds the world.
int ps_servers(int configured, int world);

}  // namespace dpg::train
