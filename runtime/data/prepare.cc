// prepare(): read, normalise with training statistics, partition, and write the shards, the test
// split and the manifest into a temporary sibling folder that is renamed into place at the end.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/data/dataset.h"
#include "runtime/data/io.h"
#include "runtime/data/normalize.h"
#include "runtime/data/partition.h"
#include "runtime/data/readers.h"
#include "runtime/data/shard.h"

namespace dpg::data {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct Inputs {
  Dataset train, test;
  Json sources;
  double input_scale = 1.0;
};

// "DIR/NAME.gz" if present, else the uncompressed "DIR/NAME"; not_found naming both otherwise.
std::string idx_path(const std::string& dir, const std::string& name) {
  const fs::path gz = fs::path(dir) / (name + ".gz");
  const fs::path plain = fs::path(dir) / name;
  std::error_code ec;
  if (fs::is_regular_file(gz, ec)) return gz.string();
  if (fs::is_regular_file(plain, ec)) return plain.string();
  fail(Code::not_found, gz.string() + ": no such file (nor " + plain.string() + ")");
}

Inputs read_inputs(const PrepareOptions& o) {
  Inputs in;
  if (o.format == "idx") {
    const int classes = o.num_classes > 0 ? o.num_classes : 10;
    const std::string ti = idx_path(o.idx_dir, "train-images-idx3-ubyte");
    const std::string tl = idx_path(o.idx_dir, "train-labels-idx1-ubyte");
    const std::string si = idx_path(o.idx_dir, "t10k-images-idx3-ubyte");
    const std::string sl = idx_path(o.idx_dir, "t10k-labels-idx1-ubyte");
    in.train = read_idx(ti, tl, classes);
    in.test = read_idx(si, sl, classes);
    in.sources = {
        {"train_images", ti}, {"train_labels", tl}, {"test_images", si}, {"test_labels", sl}};
    in.input_scale = 1.0 / 255.0;
    if (in.test.cols != in.train.cols) {
      fail(Code::invalid_argument, si + ": images have " + std::to_string(in.test.cols) +
                                       " pixels, the training images " +
                                       std::to_string(in.train.cols));
    }
    return in;
  }
  in.train = read_csv(o.train_csv, o.label_column, o.num_classes);
  in.test = read_csv(o.test_csv, o.label_column, o.num_classes);
  in.sources = {{"train", o.train_csv}, {"test", o.test_csv}};
  if (in.test.cols != in.train.cols) {
    fail(Code::invalid_argument, o.test_csv + ": " + std::to_string(in.test.cols) +
                                     " feature columns, but " + o.train_csv + " has " +
                                     std::to_string(in.train.cols));
  }
  // Inferred classes: the largest label of either split + 1, so the splits agree.
  const int classes = std::max(in.train.num_classes, in.test.num_classes);
  in.train.num_classes = in.test.num_classes = classes;
  return in;
}

// The prepared folder's final path, without a trailing separator.
fs::path checked_out_dir(const std::string& out_dir) {
  fs::path out = fs::path(out_dir).lexically_normal();
  if (!out.empty() && !out.has_filename()) out = out.parent_path();
  const std::string name = out.filename().string();
  if (out_dir.empty() || name.empty() || name == "." || name == "..") {
    fail(Code::invalid_argument, "out: \"" + out_dir + "\" does not name a folder to create");
  }
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec)) {
      fail(Code::invalid_argument, out.string() + ": exists and is not a folder");
    }
    if (!fs::is_empty(out, ec) && !fs::exists(out / "manifest.json", ec)) {
      fail(Code::invalid_argument, out.string() +
                                       ": exists and is not a prepared data folder "
                                       "(no manifest.json); refusing to replace it");
    }
  }
  return out;
}

void validate(const PrepareOptions& o) {
  if (o.format != "idx" && o.format != "csv") {
    fail(Code::invalid_argument, "format: expected \"idx\" or \"csv\", got \"" + o.format + "\"");
  }
  if (o.format == "csv" && (o.train_csv.empty() || o.test_csv.empty())) {
    fail(Code::invalid_argument, "format csv needs both a train CSV and a test CSV file");
  }
  // A shard file and a manifest entry per peer; a histogram and an output unit per class.
  if (o.peers < 1 || o.peers > kMaxPreparePeers)
    fail(Code::invalid_argument, "peers must be in [1, " + std::to_string(kMaxPreparePeers) +
                                     "], got " + std::to_string(o.peers));
  if (o.num_classes < 0 || o.num_classes > kMaxClasses) {
    fail(Code::invalid_argument, "num_classes must be in [0, " + std::to_string(kMaxClasses) +
                                     "], got " + std::to_string(o.num_classes));
  }
  if (o.label_column < 0) {
    fail(Code::invalid_argument,
         "label_column must be >= 0, got " + std::to_string(o.label_column));
  }
  if (o.normalize != "global" && o.normalize != "feature" && o.normalize != "none") {
    fail(Code::invalid_argument,
         "normalize: expected \"global\", \"feature\" or \"none\", got \"" + o.normalize + "\"");
  }
}

// A folder that is removed on destruction unless committed (renamed into place).
class TempDir {
 public:
  explicit TempDir(const fs::path& out) : out_(out) {
    const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
    std::string stem = ".";
    stem += out.filename().string();
    const std::string pid = std::to_string(::getpid());
    path_ = parent / (stem + ".tmp." + pid);
    old_ = parent / (stem + ".old." + pid);
    std::error_code ec;
    fs::create_directories(parent, ec);
    fs::remove_all(path_, ec);
    if (!fs::create_directory(path_, ec)) {
      fail(Code::failed_precondition, path_.string() + ": cannot create folder: " + ec.message());
    }
  }
  ~TempDir() {
    std::error_code ec;
    if (!committed_) fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }

  // Moves an existing out folder aside only now that the new one is complete.
  void commit() {
    std::error_code ec;
    const bool replacing = fs::exists(out_, ec);
    if (replacing) {
      fs::remove_all(old_, ec);
      fs::rename(out_, old_, ec);
      if (ec)
        fail(Code::failed_precondition, out_.string() + ": cannot move aside: " + ec.message());
    }
    fs::rename(path_, out_, ec);
    if (ec) {
      std::error_code ignored;
      if (replacing) fs::rename(old_, out_, ignored);
      fail(Code::failed_precondition,
           out_.string() + ": cannot rename into place: " + ec.message());
    }
    committed_ = true;
    if (replacing) fs::remove_all(old_, ec);
  }

 private:
  fs::path out_, path_, old_;
  bool committed_ = false;
};

void write_bytes(const fs::path& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(Code::failed_precondition, path.string() + ": cannot create file");
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) fail(Code::failed_precondition, path.string() + ": write failed (disk full, or past a file size limit?)");
}

// Writes one split file and returns its manifest entry.
Json write_split(const fs::path& dir, const std::string& file, const Dataset& source,
                 std::span<const std::size_t> indices, bool label_histogram) {
  const std::vector<unsigned char> bytes = encode_shard(source, indices);
  write_bytes(dir / file, bytes);
  Json entry = {{"file", file}, {"rows", indices.size()}};
  if (label_histogram) {
    std::vector<std::int64_t> histogram(source.num_classes, 0);
    for (std::size_t i : indices) ++histogram[source.labels[i]];
    entry["label_histogram"] = histogram;
  }
  return entry;
}

std::vector<std::size_t> all_rows(std::size_t n) {
  std::vector<std::size_t> all(n);
  std::iota(all.begin(), all.end(), std::size_t{0});
  return all;
}

std::string shard_name(int rank) {
  std::string digits = std::to_string(rank);
  return "shard-" + std::string(digits.size() < 5 ? 5 - digits.size() : 0, '0') + digits + ".bin";
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void prepare(const PrepareOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  validate(o);
  const PartitionSpec spec = parse_partition(o.partition);
  const fs::path out = checked_out_dir(o.out_dir);

  Inputs in = read_inputs(o);
  DPG_DEBUG("prepare: read " << in.train.rows << " train and " << in.test.rows << " test rows in "
                             << seconds_since(t0) << " s");
  // Held out before anything is computed from the training rows, the normalisation included.
  Dataset validation;
  if (o.validation_rows > 0) {
    const ValidationSplit split = split_validation(in.train.rows, o.validation_rows, o.seed);
    validation = select_rows(in.train, split.validation);
    in.train = select_rows(in.train, split.train);
  }
  const NormStats stats = compute_norm_stats(in.train, o.normalize);
  apply_norm(stats, in.train);
  apply_norm(stats, in.test);
  if (validation.rows > 0) apply_norm(stats, validation);
  const auto shards = make_partition(spec, in.train.labels, in.train.num_classes, o.peers, o.seed);

  Json manifest = {{"dpgossip_data_version", kDataVersion},
                   {"format", o.format},
                   {"sources", in.sources},
                   {"input_scale", in.input_scale},
                   {"normalize", norm_stats_json(stats)},
                   {"num_classes", in.train.num_classes},
                   {"cols", in.train.cols},
                   {"peers", o.peers},
                   {"partition", o.partition},
                   {"seed", o.seed},
                   {"train_rows", in.train.rows},
                   {"validation_rows", validation.rows},
                   {"label_histograms", o.label_histograms},
                   {"shard_version", kShardVersion}};
  if (o.format == "csv") manifest["label_column"] = o.label_column;

  TempDir tmp(out);
  Json entries = Json::array();
  for (int r = 0; r < o.peers; ++r) {
    entries.push_back(
        write_split(tmp.path(), shard_name(r), in.train, shards[r], o.label_histograms));
  }
  manifest["shards"] = std::move(entries);
  manifest["test"] =
      write_split(tmp.path(), "test.bin", in.test, all_rows(in.test.rows), o.label_histograms);
  if (validation.rows > 0) {
    manifest["validation"] = write_split(tmp.path(), "validation.bin", validation,
                                         all_rows(validation.rows), o.label_histograms);
  }
  const std::string text = manifest.dump(2) + "\n";
  write_bytes(tmp.path() / "manifest.json", std::vector<unsigned char>(text.begin(), text.end()));
  tmp.commit();
  DPG_DEBUG("prepare: wrote " << out.string() << " in " << seconds_since(t0) << " s");
}

}  // namespace dpg::data
