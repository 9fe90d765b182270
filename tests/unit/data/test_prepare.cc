#include <doctest/doctest.h>

#include <cmath>

#include "runtime/core/json_io.h"
#include "runtime/data/dataset.h"
#include "runtime/data/partition.h"
#include "runtime/data/shard.h"
#include "tests/unit/data/data_test_util.h"

using namespace dpg::data;
using namespace dpg::data::testing;
using dpg::Code;

namespace {

constexpr std::uint32_t kTrain = 10, kTest = 4, kSide = 2, kPixels = 6;

int train_pixel(std::uint32_t i, std::uint32_t p) {
  return static_cast<int>((i * 25 + p * 10) % 256);
}
int test_pixel(std::uint32_t i, std::uint32_t p) { return static_cast<int>(200 + i + p); }
int train_label(std::size_t i) { return static_cast<int>(i % 3); }

// Writes the four Fashion-MNIST-named files of a tiny synthetic IDX data set into `dir`.
void write_idx_set(const fs::path& dir) {
  fs::create_directories(dir);
  std::vector<int> train_labels, test_labels = {2, 1, 0, 2};
  for (std::size_t i = 0; i < kTrain; ++i) train_labels.push_back(train_label(i));
  write_gz((dir / "train-images-idx3-ubyte.gz").string(),
           idx_images(kTrain, kSide, 3, train_pixel));
  write_gz((dir / "train-labels-idx1-ubyte.gz").string(), idx_labels(train_labels));
  // Uncompressed files are accepted too.
  write_bytes((dir / "t10k-images-idx3-ubyte").string(), idx_images(kTest, kSide, 3, test_pixel));
  write_bytes((dir / "t10k-labels-idx1-ubyte").string(), idx_labels(test_labels));
}

struct MeanStd {
  double mean, std;
};

MeanStd train_stats() {
  double sum = 0, sq = 0;
  const double n = kTrain * kPixels;
  for (std::uint32_t i = 0; i < kTrain; ++i) {
    for (std::uint32_t p = 0; p < kPixels; ++p) sum += train_pixel(i, p) / 255.0;
  }
  const double mean = sum / n;
  for (std::uint32_t i = 0; i < kTrain; ++i) {
    for (std::uint32_t p = 0; p < kPixels; ++p) sq += std::pow(train_pixel(i, p) / 255.0 - mean, 2);
  }
  return {mean, std::sqrt(sq / n)};
}

PrepareOptions idx_options(const TempFolder& t, int peers) {
  PrepareOptions o;
  o.idx_dir = t.file("idx");
  o.out_dir = t.file("out");
  o.peers = peers;
  o.seed = 7;
  return o;
}

// CSV input from t's train.csv and test.csv, the label in column 2, into t's "out".
PrepareOptions csv_options(const TempFolder& t, const std::string& normalize) {
  PrepareOptions o;
  o.format = "csv";
  o.train_csv = t.file("train.csv");
  o.test_csv = t.file("test.csv");
  o.label_column = 2;
  o.normalize = normalize;
  o.out_dir = t.file("out");
  return o;
}

// Names of the entries of `dir` that start with '.', i.e. temporary or moved-aside folders.
std::vector<std::string> hidden_entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name[0] == '.') names.push_back(name);
  }
  return names;
}

}  // namespace

TEST_CASE("prepare idx + load_prepared: shards are the iid rows, normalised with train stats") {
  TempFolder t("prep_idx");
  write_idx_set(t.path() / "idx");
  const int peers = 3;
  prepare(idx_options(t, peers));
  const MeanStd s = train_stats();
  std::size_t total = 0;
  for (int r = 0; r < peers; ++r) {
    const Prepared p = load_prepared(t.file("out"), r, peers);
    const std::vector<std::size_t> idx = iid_indices(kTrain, r, peers, 7);
    REQUIRE(p.train.rows == idx.size());
    CHECK(p.train.cols == kPixels);
    CHECK(p.train.num_classes == 10);
    total += p.train.rows;
    for (std::size_t row = 0; row < idx.size(); ++row) {
      CHECK(p.train.labels[row] == train_label(idx[row]));
      for (std::uint32_t c = 0; c < kPixels; ++c) {
        const double want = (train_pixel(idx[row], c) / 255.0 - s.mean) / s.std;
        CHECK(p.train.features[row * kPixels + c] == doctest::Approx(want).epsilon(1e-5));
      }
    }
    // The test split is normalised with the *training* statistics.
    REQUIRE(p.test.rows == kTest);
    CHECK(p.test.labels == std::vector<std::int32_t>{2, 1, 0, 2});
    const double want_test = (test_pixel(3, 5) / 255.0 - s.mean) / s.std;
    CHECK(p.test.features[3 * kPixels + 5] == doctest::Approx(want_test).epsilon(1e-5));
    CHECK(p.manifest["normalize"]["mean"].get<double>() == doctest::Approx(s.mean));
    CHECK(p.manifest["normalize"]["std"].get<double>() == doctest::Approx(s.std));
  }
  CHECK(total == kTrain);
  const Prepared p = load_prepared(t.file("out"), 0, peers);
  CHECK(p.manifest["peers"] == peers);
  CHECK(p.manifest["train_rows"] == kTrain);
  // No label histograms unless asked: every peer reads the manifest.
  CHECK_FALSE(p.manifest["test"].contains("label_histogram"));
  CHECK_FALSE(p.manifest["shards"][0].contains("label_histogram"));
  CHECK(p.validation.rows == 0);
  CHECK(p.manifest["shards"].size() == static_cast<std::size_t>(peers));
  CHECK(hidden_entries(t.path()).empty());
}

TEST_CASE("prepare --label-histograms writes each split's counts") {
  TempFolder t("prep_hist");
  write_idx_set(t.path() / "idx");
  PrepareOptions o = idx_options(t, 2);
  o.label_histograms = true;
  prepare(o);
  const Prepared p = load_prepared(t.file("out"), 0, 2);
  CHECK(p.manifest["test"]["label_histogram"] == nlohmann::json({1, 1, 2, 0, 0, 0, 0, 0, 0, 0}));
  std::int64_t counted = 0;
  for (const auto& shard : p.manifest["shards"]) {
    for (const auto& n : shard["label_histogram"]) counted += n.get<std::int64_t>();
  }
  CHECK(counted == kTrain);
}

TEST_CASE("prepare --validation holds out training rows before normalising and partitioning") {
  TempFolder t("prep_val");
  write_idx_set(t.path() / "idx");
  PrepareOptions o = idx_options(t, 2);
  o.validation_rows = 3;
  prepare(o);
  const ValidationSplit split = split_validation(kTrain, 3, 7);
  REQUIRE(split.validation.size() == 3);
  // The statistics of the rows left to train on only.
  double sum = 0, sq = 0;
  const double n = static_cast<double>(split.train.size() * kPixels);
  for (std::size_t i : split.train) {
    for (std::uint32_t c = 0; c < kPixels; ++c) sum += train_pixel(i, c) / 255.0;
  }
  const double mean = sum / n;
  for (std::size_t i : split.train) {
    for (std::uint32_t c = 0; c < kPixels; ++c) sq += std::pow(train_pixel(i, c) / 255.0 - mean, 2);
  }
  const double sd = std::sqrt(sq / n);
  const Prepared p0 = load_prepared(t.file("out"), 0, 2);
  const Prepared p1 = load_prepared(t.file("out"), 1, 2);
  CHECK(p0.manifest["train_rows"] == kTrain - 3);
  CHECK(p0.manifest["validation_rows"] == 3);
  CHECK(p0.train.rows + p1.train.rows == kTrain - 3);
  REQUIRE(p0.validation.rows == 3);
  for (std::size_t r = 0; r < 3; ++r) {
    const std::size_t src = split.validation[r];
    CHECK(p0.validation.labels[r] == train_label(src));
    const double want = (train_pixel(src, 4) / 255.0 - mean) / sd;
    CHECK(p0.validation.features[r * kPixels + 4] == doctest::Approx(want).epsilon(1e-5));
  }
  // No validation row is trained on: every training row's label and first pixel match a row
  // outside the held-out ones (the synthetic rows are all distinct in pixel 0).
  for (const Prepared* p : {&p0, &p1}) {
    for (std::size_t r = 0; r < p->train.rows; ++r) {
      const float x = p->train.features[r * kPixels];
      for (std::size_t v = 0; v < 3; ++v) CHECK(x != p0.validation.features[v * kPixels]);
    }
  }
  o.validation_rows = kTrain;
  CHECK_THROWS_WITH_AS(prepare(o), doctest::Contains("would leave none"), dpg::Error);
}

TEST_CASE("prepare csv: per-feature normalisation from train only, constant column -> std 1") {
  TempFolder t("prep_csv");
  // Column a: train values 1, 3 (mean 2, std 1); column b constant 5 (std floored to 1).
  write_text(t.file("train.csv"), "a,b,label\n1,5,0\n3,5,2\n");
  write_text(t.file("test.csv"), "11,7,1\n");
  PrepareOptions o = csv_options(t, "feature");
  prepare(o);
  const Prepared p = load_prepared(o.out_dir, 0, 1);
  CHECK(p.train.num_classes == 3);  // inferred from the largest label
  CHECK(p.train.rows == 2);
  CHECK(p.test.features == std::vector<float>{9.0f, 2.0f});
  std::vector<float> train = p.train.features;
  std::sort(train.begin(), train.end());
  CHECK(train == std::vector<float>{-1.0f, 0.0f, 0.0f, 1.0f});
  CHECK(p.manifest["normalize"]["std"][1] == 1.0);
  CHECK(p.manifest["label_column"] == 2);

  o.normalize = "none";
  o.num_classes = 5;
  prepare(o);  // replaces the folder
  const Prepared q = load_prepared(o.out_dir, 0, 1);
  CHECK(q.test.features == std::vector<float>{11.0f, 7.0f});
  CHECK(q.train.num_classes == 5);
  CHECK(hidden_entries(t.path()).empty());
}

TEST_CASE("prepare: the manifest every peer reads holds nothing computed from a shard's rows") {
  // Two training sets that differ in one example of shard 0, without normalisation (whose
  // statistics are the one documented exception, docs/PRIVACY.md): the manifests are equal, so
  // no peer learns from it anything about another peer's rows; the shard itself differs, and
  // its checksum lives in its own header.
  TempFolder t("prep_manifest_private");
  PrepareOptions o = csv_options(t, "none");
  o.peers = 2;
  o.partition = "iid";
  write_text(t.file("test.csv"), "11,7,1\n");
  const auto run = [&](const std::string& first_row, const std::string& out) {
    write_text(t.file("train.csv"), first_row + "\n3,5,2\n4,1,1\n2,2,0\n");
    o.out_dir = t.file(out);
    prepare(o);
    dpg::Json m = dpg::read_json_file(t.file(out + "/manifest.json"));
    m.erase("seconds");
    return m;
  };
  const dpg::Json a = run("1,5,0", "a");
  const dpg::Json b = run("1,6,0", "b");  // one feature of one example changed
  CHECK(a.dump() == b.dump());
  bool differ = false;
  for (const char* shard : {"/shard-00000.bin", "/shard-00001.bin"}) {
    const Bytes x = read_bytes(t.file(std::string("a") + shard));
    const Bytes y = read_bytes(t.file(std::string("b") + shard));
    if (x != y) {
      differ = true;
      // The header's checksum (offset 28) moved with the rows.
      CHECK(!std::equal(x.begin() + 28, x.begin() + 32, y.begin() + 28));
    }
  }
  CHECK(differ);
  CHECK(load_prepared(t.file("b"), 0, 2).train.rows + load_prepared(t.file("b"), 1, 2).train.rows == 4);
}

TEST_CASE("load_prepared: a folder of another layout version is refused, naming the field") {
  TempFolder t("prep_version");
  write_idx_set(t.path() / "idx");
  prepare(idx_options(t, 1));
  CHECK_NOTHROW(load_prepared(t.file("out"), 0, 1));
  const Bytes text = read_bytes(t.file("out/manifest.json"));
  nlohmann::json m = nlohmann::json::parse(text.begin(), text.end());
  CHECK(m["dpgossip_data_version"] == dpg::data::kDataVersion);
  m["dpgossip_data_version"] = 99;
  write_text(t.file("out/manifest.json"), m.dump());
  const std::string msg = error_of([&] { load_prepared(t.file("out"), 0, 1); });
  CHECK(contains(msg, "manifest.json:/dpgossip_data_version: layout version 99"));
  m.erase("dpgossip_data_version");
  write_text(t.file("out/manifest.json"), m.dump());
  CHECK(contains(error_of([&] { load_prepared(t.file("out"), 0, 1); }),
                 "/dpgossip_data_version: missing"));
}

TEST_CASE("load_prepared: a corrupted or truncated shard is detected and named") {
  TempFolder t("prep_corrupt");
  write_idx_set(t.path() / "idx");
  prepare(idx_options(t, 2));
  const std::string shard = t.file("out/shard-00001.bin");
  Bytes bytes = read_bytes(shard);
  bytes[40] ^= 0x01;
  write_bytes(shard, bytes);
  Code code{};
  std::string msg = error_of([&] { load_prepared(t.file("out"), 1, 2); }, &code);
  CHECK(code == Code::data_loss);
  CHECK(contains(msg, shard));
  CHECK(contains(msg, "checksum"));
  CHECK_NOTHROW(load_prepared(t.file("out"), 0, 2));  // a peer verifies only its own shard

  bytes[40] ^= 0x01;
  bytes.resize(bytes.size() - 4);
  write_bytes(shard, bytes);
  msg = error_of([&] { load_prepared(t.file("out"), 1, 2); }, &code);
  CHECK(code == Code::data_loss);
  CHECK(contains(msg, shard));
  CHECK(contains(msg, "truncated"));

  msg = error_of([&] { load_prepared(t.file("out"), 0, 3); }, &code);
  CHECK(contains(msg, "manifest.json"));
  CHECK(contains(msg, "2 shards"));
  fs::remove(t.file("out/test.bin"));
  msg = error_of([&] { load_prepared(t.file("out"), 0, 2); }, &code);
  CHECK(contains(msg, "test.bin"));
}

TEST_CASE("load_prepared with a row pick: select_rows of the whole shard, checked whole") {
  TempFolder t("prep_pick");
  write_idx_set(t.path() / "idx");
  prepare(idx_options(t, 1));
  const Prepared whole = load_prepared(t.file("out"), 0, 1);
  const std::vector<std::size_t> pick = {7, 2, 9, 0};
  std::size_t asked_rows = 0;
  const Prepared part = load_prepared(t.file("out"), 0, 1, [&](std::size_t rows) {
    asked_rows = rows;
    return pick;
  });
  CHECK(asked_rows == kTrain);
  const Dataset want = select_rows(whole.train, pick);
  CHECK(part.train.rows == 4);
  CHECK(part.train.features == want.features);
  CHECK(part.train.labels == want.labels);
  CHECK(part.test.features == whole.test.features);
  // A byte of a row not kept is still checked: the whole file's checksum.
  const std::string shard = t.file("out/shard-00000.bin");
  Bytes bytes = read_bytes(shard);
  bytes[kShardHeaderBytes + 5 * kPixels * sizeof(float) + 1] ^= 0x01;  // in row 5's features
  write_bytes(shard, bytes);
  Code code{};
  const std::string msg = error_of([&] {
    load_prepared(t.file("out"), 0, 1, [&](std::size_t) { return pick; });
  }, &code);
  CHECK(code == Code::data_loss);
  CHECK(contains(msg, "checksum"));
}

TEST_CASE("prepare: a failure leaves an existing folder untouched and no temporary behind") {
  TempFolder t("prep_atomic");
  write_idx_set(t.path() / "idx");
  PrepareOptions o = idx_options(t, 2);
  prepare(o);
  const Bytes before = read_bytes(t.file("out/manifest.json"));

  write_bytes(t.file("idx/t10k-labels-idx1-ubyte"), idx_labels({1, 2}));  // count mismatch
  o.peers = 3;
  const std::string msg = error_of([&] { prepare(o); });
  CHECK(contains(msg, "t10k-labels-idx1-ubyte"));
  CHECK(read_bytes(t.file("out/manifest.json")) == before);
  CHECK(hidden_entries(t.path()).empty());

  write_bytes(t.file("idx/t10k-labels-idx1-ubyte"), idx_labels({1, 2, 3, 4}));
  o.partition = "dirichlet:0.001";
  o.peers = 9;  // more peers than rows of some classes: an empty shard
  CHECK(contains(error_of([&] { prepare(o); }), "larger alpha"));
  CHECK(read_bytes(t.file("out/manifest.json")) == before);
  CHECK(hidden_entries(t.path()).empty());

  // A folder that is not a prepared one is never replaced.
  fs::create_directories(t.path() / "precious");
  write_text(t.file("precious/notes.txt"), "keep");
  o = idx_options(t, 1);
  o.out_dir = t.file("precious");
  CHECK(contains(error_of([&] { prepare(o); }), "refusing"));
  CHECK(fs::exists(t.file("precious/notes.txt")));

  o.out_dir = t.file("out");
  o.normalize = "sometimes";
  CHECK(contains(error_of([&] { prepare(o); }), "normalize"));
  o.normalize = "global";
  o.format = "parquet";
  CHECK(contains(error_of([&] { prepare(o); }), "format"));
  CHECK(read_bytes(t.file("out/manifest.json")) == before);
}

TEST_CASE("prepare: missing IDX files are not_found naming the file") {
  TempFolder t("prep_missing");
  PrepareOptions o = idx_options(t, 1);
  Code code{};
  const std::string msg = error_of([&] { prepare(o); }, &code);
  CHECK(code == Code::not_found);
  CHECK(contains(msg, "train-images-idx3-ubyte"));
  CHECK(!fs::exists(t.file("out")));
  CHECK(hidden_entries(t.path()).empty());
}
