// One peer's data for a run of `world` peers: its own shard when the folder was prepared for
// that many peers, or, from a folder prepared whole (one shard), the rows the iid partition gives
// it, so that one prepared folder serves any number of peers.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"

namespace dpg::data {

Prepared load_for_peer(const std::string& dir, int rank, int world, std::uint64_t seed);
// Whether the folder was prepared whole (one shard), so any split of its rows can be loaded.
bool prepared_whole(const std::string& dir);
// From a folder prepared whole: rank's rows when the peers take counts[r] rows each
// (counted_indices). A folder with a shard per peer is refused (its rows may not move).
Prepared load_counted(const std::string& dir, int rank, const std::vector<std::size_t>& counts,
                      std::uint64_t seed);

// Waits until `dir`/manifest.json exists (another peer is preparing the folder), polling; throws
// deadline_exceeded naming the folder when `limit` passes first.
void wait_for_manifest(const std::string& dir, std::chrono::milliseconds limit);

}  // namespace dpg::data
