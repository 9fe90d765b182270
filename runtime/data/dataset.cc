// load_prepared(): one peer's view of a folder written by prepare().
#include "runtime/data/dataset.h"

#include <algorithm>
#include <filesystem>

#include "runtime/core/error.h"
#include "runtime/core/json_io.h"
#include "runtime/data/shard.h"

namespace dpg::data {
namespace {

namespace fs = std::filesystem;

// Reads one split entry of the manifest ({file, rows}) and the file it names.
Dataset load_split(const fs::path& dir, const Json& entry, const std::string& where,
                   std::size_t cols, int num_classes, const RowPick& pick = {}) {
  const JsonReader r(entry, where);
  const std::string file = r.string("file");
  if (file.empty() || fs::path(file).has_parent_path() || file == "." || file == "..") {
    r.fail_at("file", "expected a plain file name inside the folder, got \"" + file + "\"");
  }
  const long long rows = r.integer("rows");
  if (rows <= 0) r.fail_at("rows", "expected a positive integer, got " + std::to_string(rows));
  ShardExpectation expect;
  expect.rows = static_cast<std::size_t>(rows);
  expect.cols = cols;
  expect.num_classes = num_classes;
  if (!pick) return read_shard((dir / file).string(), expect);
  const std::vector<std::size_t> rows_kept = pick(expect.rows);
  return read_shard((dir / file).string(), expect, &rows_kept);
}

}  // namespace

Dataset select_rows(const Dataset& source, const std::vector<std::size_t>& indices) {
  Dataset out;
  out.rows = indices.size();
  out.cols = source.cols;
  out.num_classes = source.num_classes;
  out.features.resize(out.rows * out.cols);
  out.labels.resize(out.rows);
  for (std::size_t i = 0; i < indices.size(); ++i) {
    std::copy_n(source.features.data() + indices[i] * out.cols, out.cols,
                out.features.data() + i * out.cols);
    out.labels[i] = source.labels[indices[i]];
  }
  return out;
}

Prepared load_prepared(const std::string& dir, int rank, int world, const RowPick& pick_train) {
  const fs::path folder(dir);
  const std::string path = (folder / "manifest.json").string();
  Prepared p;
  p.manifest = read_json_file(path);
  const JsonReader m(p.manifest, path + ":");
  // The layout this code reads; a folder of another layout would be read as garbage.
  const long long version = m.integer("dpgossip_data_version");
  if (version != kDataVersion) {
    m.fail_at("dpgossip_data_version",
              "layout version " + std::to_string(version) + ", this dpgossip reads version " +
                  std::to_string(kDataVersion) + " (run dpgossip prepare again)");
  }
  const long long peers = m.integer("peers");
  if (world < 1) fail(Code::invalid_argument, "world must be >= 1, got " + std::to_string(world));
  if (peers != world) {
    fail(Code::invalid_argument, path + ": holds " + std::to_string(peers) +
                                     " shards but world is " + std::to_string(world) +
                                     " (run dpgossip prepare --peers " + std::to_string(world) +
                                     ")");
  }
  if (rank < 0 || rank >= world) {
    fail(Code::invalid_argument,
         "rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world) + ")");
  }
  const long long cols = m.integer("cols");
  const long long classes = m.integer("num_classes");
  if (cols <= 0) m.fail_at("cols", "expected a positive integer");
  if (classes <= 0 || classes > (1LL << 30))
    m.fail_at("num_classes", "expected a positive integer");
  const Json& shards = m.at("shards");
  if (!shards.is_array() || shards.size() != static_cast<std::size_t>(world)) {
    m.fail_at("shards", "expected an array of " + std::to_string(world) + " entries");
  }
  const auto c = static_cast<std::size_t>(cols);
  const int k = static_cast<int>(classes);
  p.train = load_split(folder, shards[rank], m.path("shards/" + std::to_string(rank)), c, k,
                       pick_train);
  p.test = load_split(folder, m.at("test"), m.path("test"), c, k);
  if (p.manifest.contains("validation")) {
    p.validation = load_split(folder, m.at("validation"), m.path("validation"), c, k);
  }
  return p;
}

}  // namespace dpg::data
