// One peer's data for a run of `world` peers: its own shard when the folder was prepared for
// that many peers, or, from a folder prepared whole (one shard), the rows the iid partition gives
// it, so that one prepared folder serves any number of peers.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "runtime/data/dataset.h"

namespace dpg::data {

Prepared load_for_peer(const std::string& dir, int rank, int world, std::uint64_t seed);

// Waits until `dir`/manifest.json exists (another peer is preparing the folder), polling; throws
// deadline_exceeded naming the folder when `limit` passes first.
void wait_for_manifest(const std::string& dir, std::chrono::milliseconds limit);

}  // namespace dpg::data
