// The data room's public face: prepare() turns IDX or CSV files into per-peer shards plus a test
// split and a manifest; load_prepared() gives one peer its shard back, verified. Features are
// stored already normalised with statistics of the training split only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dpg::data {

struct Dataset {
  std::size_t rows = 0, cols = 0;
  int num_classes = 0;
  std::vector<float> features;       // (rows, cols), row-major, normalised
  std::vector<std::int32_t> labels;  // (rows)
};

// The rows `indices` of `source`, in that order.
Dataset select_rows(const Dataset& source, const std::vector<std::size_t>& indices);

struct Prepared {
  Dataset train;
  Dataset test;
  nlohmann::json manifest;
  // Training rows held out by `prepare --validation N` (rows 0 when the folder has none): the
  // split to tune on, so that the test split is looked at once, for the chosen configuration.
  Dataset validation = {};
};

// The layout of a prepared folder, as its manifest's "dpgossip_data_version" says (docs/DATA.md).
inline constexpr long long kDataVersion = 2;

// Loads shard `rank` of a folder written by prepare(), plus the (shared) test split. Verifies the
// layout version, the checksums and that the manifest holds exactly `world` shards; errors name
// the file.
// With `pick_train`, only the training rows it returns (given the shard's row count; each row at
// most once, in the order given), read without holding the shard whole.
using RowPick = std::function<std::vector<std::size_t>(std::size_t rows)>;
Prepared load_prepared(const std::string& dir, int rank, int world,
                       const RowPick& pick_train = {});

// The most shards and classes prepare() writes (docs/LIMITS.md).
inline constexpr int kMaxPreparePeers = 65536;
inline constexpr int kMaxClasses = 1 << 20;

struct PrepareOptions {
  std::string format = "idx";                                 // "idx" or "csv"
  std::string idx_dir = "/usr/share/datasets/fashion-mnist";  // idx: folder with the 4 files
  std::string train_csv, test_csv;                            // csv
  int label_column = 0;
  int num_classes = 0;  // 0: 10 for idx, inferred for csv
  std::string out_dir;
  int peers = 1;
  std::string partition = "iid";  // "iid" or "dirichlet:ALPHA"
  // "global" (one mean/std over all train features), "feature" (per column, std floor 1e-6 -> 1),
  // "none"
  std::string normalize = "global";
  std::uint64_t seed = 0;
  // Training rows held out as validation.bin before normalising and partitioning (0: none).
  std::size_t validation_rows = 0;
  // Each shard's label histogram in the manifest. Off by default: every peer reads the manifest,
  // so the histograms would tell each peer the others' label mix (docs/PRIVACY.md, outputs).
  bool label_histograms = false;
};

// Writes out_dir (shard-NNNNN.bin per peer, test.bin, manifest.json) through a temporary sibling
// folder renamed into place at the end; on error nothing is left behind and an existing out_dir
// is untouched.
void prepare(const PrepareOptions& options);

// The training-set indices (of n) that peer `rank` of `world` gets under the "iid" partition:
// PyTorch DistributedSampler style (one seeded permutation, then positions rank, rank + world, ...;
// no padding). Any peer can compute its own shard without communication.
std::vector<std::size_t> iid_indices(std::size_t n, int rank, int world, std::uint64_t seed);
// Rank `rank`'s rows when the peers take counts[0], counts[1], ... of n rows (a load balancer's
// uneven shares): consecutive runs of one seeded permutation, so the shards never overlap.
std::vector<std::size_t> counted_indices(std::size_t n, int rank,
                                         const std::vector<std::size_t>& counts,
                                         std::uint64_t seed);

}  // namespace dpg::data
