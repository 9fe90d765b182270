// `dpgossip prepare`: turns Fashion-MNIST (IDX) or CSV files into per-peer shards, a test split
// and a manifest (see docs/DATA.md), then prints a summary of the manifest.
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "apps/commands.h"
#include "apps/parse.h"
#include "runtime/core/json_io.h"
#include "runtime/data/dataset.h"

namespace dpg::app {
namespace {

struct PrepareArgs {
  data::PrepareOptions options;
  bool json = false;
};

std::string histogram_text(const Json& histogram) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < histogram.size(); ++i) os << (i ? " " : "") << histogram[i].dump();
  os << "]";
  return os.str();
}

// The manifest without per-feature statistics (784 numbers each), plus where and how long.
Json summary(const Json& manifest, const std::string& out, double seconds) {
  Json s = manifest;
  Json& norm = s["normalize"];
  if (norm.value("mode", "") == "feature") {
    norm.erase("mean");
    norm.erase("std");
    norm["stats"] = "per feature, in manifest.json";
  }
  s["out"] = out;
  s["seconds"] = std::round(seconds * 1000.0) / 1000.0;
  return s;
}

void print_human(const Json& s) {
  std::cout << "prepared " << s["out"].get<std::string>() << " in " << s["seconds"].dump()
            << " s: " << s["train_rows"].dump() << " train rows in " << s["peers"].dump()
            << " shard(s) (partition " << s["partition"].get<std::string>() << ", seed "
            << s["seed"].dump() << "), " << s["test"]["rows"].dump() << " test rows, "
            << s.value("validation_rows", 0) << " validation rows, "
            << s["cols"].dump() << " features, " << s["num_classes"].dump() << " classes\n";
  const Json& norm = s["normalize"];
  std::cout << "normalize " << norm["mode"].get<std::string>();
  if (norm.contains("mean") && norm["mean"].is_number()) {
    std::cout << std::setprecision(5) << " (mean " << norm["mean"].get<double>() << ", std "
              << norm["std"].get<double>() << ")";
  }
  std::cout << "\n";
  auto line = [](const Json& entry) {
    std::cout << "  " << std::left << std::setw(16) << entry["file"].get<std::string>()
              << std::right << std::setw(8) << entry["rows"].dump() << " rows";
    if (entry.contains("label_histogram")) {
      std::cout << "  labels " << histogram_text(entry["label_histogram"]);
    }
    std::cout << "\n";
  };
  for (const Json& entry : s["shards"]) line(entry);
  line(s["test"]);
  if (s.contains("validation")) line(s["validation"]);
}

void run(const PrepareArgs& args) {
  const auto t0 = std::chrono::steady_clock::now();
  data::prepare(args.options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string manifest_path =
      (std::filesystem::path(args.options.out_dir) / "manifest.json").string();
  const Json s = summary(read_json_file(manifest_path), args.options.out_dir, seconds);
  if (args.json) {
    std::cout << s.dump() << "\n";
  } else {
    print_human(s);
  }
}

}  // namespace

void add_prepare(CLI::App& app) {
  auto args = std::make_shared<PrepareArgs>();
  data::PrepareOptions& o = args->options;
  o.out_dir = "data/fashion-mnist";
  CLI::App* cmd = app.add_subcommand(
      "prepare", "Read IDX or CSV data, normalise it, split it among peers and write shards");
  cmd->add_option("--format", o.format, "Input format")
      ->check(CLI::IsMember({"idx", "csv"}))
      ->capture_default_str();
  cmd->add_option("--idx-dir", o.idx_dir,
                  "idx: folder with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]")
      ->capture_default_str();
  cmd->add_option("--train-csv", o.train_csv, "csv: training file");
  cmd->add_option("--test-csv", o.test_csv, "csv: test file");
  cmd->add_option("--label-column", o.label_column, "csv: 0-based column of the label")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--num-classes", o.num_classes,
                  "Number of classes (0: 10 for idx, largest label + 1 for csv)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--out", o.out_dir, "Output folder (replaced only once the new one is complete)")
      ->capture_default_str();
  cmd->add_option("--peers", o.peers, "Number of shards, one per peer")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--partition", o.partition, "iid or dirichlet:ALPHA (non-iid by label)")
      ->capture_default_str();
  cmd->add_option("--normalize", o.normalize, "global, feature or none (train statistics)")
      ->check(CLI::IsMember({"global", "feature", "none"}))
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the partition and of the validation rows")
      ->check(seed_check())
      ->capture_default_str();
  cmd->add_option("--validation", o.validation_rows,
                  "Training rows to hold out as validation.bin, chosen at random (0: none)")
      ->capture_default_str();
  cmd->add_flag("--label-histograms", o.label_histograms,
                "Write each shard's label histogram into the manifest, which every peer reads");
  cmd->add_flag("--json", args->json, "Print the manifest summary as one JSON object");
  cmd->callback([args] { run(*args); });
}

}  // namespace dpg::app
