#include "runtime/data/peer_data.h"

#include <algorithm>
#include <filesystem>
#include <thread>

#include "runtime/core/error.h"
#include "runtime/core/json_io.h"

namespace dpg::data {

Prepared load_for_peer(const std::string& dir, int rank, int world, std::uint64_t seed) {
  const std::string path = (std::filesystem::path(dir) / "manifest.json").string();
  const Json manifest = read_json_file(path);
  const long long shards = JsonReader(manifest, path + ":").integer("peers");
  if (shards == world || shards != 1) return load_prepared(dir, rank, world);
  return load_prepared(dir, 0, 1, [&](std::size_t rows) {
    return iid_indices(rows, rank, world, seed);
  });
}

bool prepared_whole(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "manifest.json").string();
  return JsonReader(read_json_file(path), path + ":").integer("peers") == 1;
}

Prepared load_counted(const std::string& dir, int rank, const std::vector<std::size_t>& counts,
                      std::uint64_t seed) {
  if (!prepared_whole(dir)) {
    fail(Code::invalid_argument, dir + " holds a shard per peer: its rows stay with their peer "
                                       "(prepare it whole to let a balancer move them)");
  }
  return load_prepared(dir, 0, 1, [&](std::size_t rows) {
    return counted_indices(rows, rank, counts, seed);
  });
}

void wait_for_manifest(const std::string& dir, std::chrono::milliseconds limit) {
  const auto manifest = std::filesystem::path(dir) / "manifest.json";
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!std::filesystem::exists(manifest)) {
    if (std::chrono::steady_clock::now() > deadline) {
      fail(Code::deadline_exceeded, manifest.string() + " did not appear within " +
                                        std::to_string(limit.count() / 1000) +
                                        " s (rank 0 prepares the data folder)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace dpg::data
