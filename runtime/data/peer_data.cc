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
  Prepared whole = load_prepared(dir, 0, 1);
  const auto rows = iid_indices(whole.train.rows, rank, world, seed);
  Dataset mine;
  mine.rows = rows.size();
  mine.cols = whole.train.cols;
  mine.num_classes = whole.train.num_classes;
  mine.features.resize(mine.rows * mine.cols);
  mine.labels.resize(mine.rows);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::copy_n(whole.train.features.data() + rows[i] * mine.cols, mine.cols,
                mine.features.data() + i * mine.cols);
    mine.labels[i] = whole.train.labels[rows[i]];
  }
  whole.train = std::move(mine);
  return whole;
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
