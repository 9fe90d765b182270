#include "apps/peer_memory.h"

#include <algorithm>
#include <filesystem>
#include <string_view>

#include "apps/parse.h"
#include "runtime/core/json_io.h"
#include "runtime/core/train_config.h"
#include "runtime/model/mlp.h"
#include "runtime/train/algorithm.h"
#include "runtime/train/run_state.h"

namespace dpg::app {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
// Measured (docs/BENCHMARKS.md, "A peer's memory"): a peer's private memory with a tiny data set
// and model (its heap, its threads' stacks, the transport's buffers, the accountant's work for
// the plan's check and its ledger), and the program's and libraries' pages it shares with the
// other peers of the machine.
constexpr double kPrivateBytes = 18 * kMiB;
constexpr double kSharedBytes = 12 * kMiB;
// Rank 0 alone calibrates the noise and makes the accountant's figures of the run's lines
// (the other peers' lines are not read: RunInputs::reports_read), keeping FFTW's plans and
// buffers for the next: once a run, counted on every machine's launch (only one holds rank 0).
constexpr double kReportBytes = 12 * kMiB;
// The plan of a summed release with distributed noise also accounts each peer's messages at the
// per-peer noise, whose privacy loss distribution spans a wider grid: on rank 0 again.
constexpr double kDistributedPlanBytes = 12 * kMiB;
// Copies of the parameters a peer holds at once (the model, the gradient, the momentum, the
// average, the neighbours' models or the reduction's buffers, the messages), rounded up.
constexpr double kModelCopies = 16;

}  // namespace

double model_and_step_bytes(double cols, double classes, const std::vector<int>& hidden,
                            double batch, double pass_rows) {
  const double floats = 4.0;
  const model::MlpSpec spec{.inputs = static_cast<int>(std::min(cols, 2e9)),
                            .hidden = hidden,
                            .classes = static_cast<int>(std::min(classes, 2e9))};
  const double params = spec.param_count();
  double activations = classes;
  for (int h : hidden) activations += h;
  double rows = 2 * std::max(1.0, batch);
  if (pass_rows > 0) rows = std::min(rows, pass_rows);
  const double step = rows * (cols + 3 * activations) * floats;
  return kModelCopies * params * floats + step;
}

double pass_rows_for(const TrainConfig& c, std::uint64_t cols, std::uint64_t classes) {
  const model::MlpSpec spec{.inputs = static_cast<int>(std::min<std::uint64_t>(cols, 1u << 30)),
                            .hidden = c.hidden,
                            .classes = static_cast<int>(std::min<std::uint64_t>(classes, 1u << 30))};
  return static_cast<double>(train::physical_rows(c, spec));
}

std::uint64_t estimate_peer_bytes(const PeerShape& s, int local_peers) {
  const double data = static_cast<double>(s.train_rows + s.eval_rows) *
                      (static_cast<double>(s.cols) + 1) * 4.0;
  const double once = kSharedBytes + kReportBytes + (s.distributed_plan ? kDistributedPlanBytes : 0);
  const double total = kPrivateBytes + once / std::max(1, local_peers) + data +
                       model_and_step_bytes(static_cast<double>(s.cols),
                                            static_cast<double>(s.classes), s.hidden, s.batch,
                                            s.pass_rows);
  return static_cast<std::uint64_t>(std::min(total, 1e18));
}

PeerShape train_shape(const std::vector<std::string>& args, int world) {
  if (args.empty() || args[0] != "train") return PeerShape{.cols = 0, .batch = 0};  // the process
  PeerShape s;
  const TrainConfig defaults;
  s.batch = defaults.batch_size;
  s.hidden = defaults.hidden;
  try {
    if (auto v = flag_value(args, "--batch-size"); !v.empty()) s.batch = std::stod(v);
    if (auto v = flag_value(args, "--hidden"); !v.empty()) s.hidden = parse_int_list(v, "--hidden");
    Algo algo = defaults.algo;
    if (auto v = flag_value(args, "--algo"); !v.empty()) algo = parse_enum<Algo>(v);
    const std::string noise = flag_value(args, "--noise-mode");
    const std::string accountant = flag_value(args, "--accountant");
    s.distributed_plan = world > 1 && train::algo_info(algo).release == dp::Release::summed &&
                         noise != "local" && accountant != "rdp" &&
                         flag_value(args, "--target") != "messages" && !has_flag(args, "--no-dp");
    std::string data = flag_value(args, "--data");
    if (data.empty()) data = defaults.data;
    const Json m = read_json_file((std::filesystem::path(data) / "manifest.json").string());
    const double rows = m.at("train_rows").get<double>(), shards = m.at("peers").get<double>();
    // A folder prepared whole is split among the peers as they load it; else each reads its shard.
    const double kept = shards == 1 ? rows / std::max(1, world) : rows / std::max(1.0, shards);
    s.train_rows = static_cast<std::uint64_t>(kept + 1);
    s.eval_rows = m.at("test").at("rows").get<std::uint64_t>();
    if (m.contains("validation")) s.eval_rows += m.at("validation").at("rows").get<std::uint64_t>();
    s.cols = m.at("cols").get<std::uint64_t>();
    s.classes = m.at("num_classes").get<std::uint64_t>();
    s.batch = s.batch * kept / std::max(1.0, rows);  // this peer's expected batch
    TrainConfig pass;  // virtual batches
    pass.hidden = s.hidden;
    if (auto v = flag_value(args, "--physical-batch"); !v.empty()) pass.physical_batch = std::stoll(v);
    if (auto v = flag_value(args, "--batch-memory"); !v.empty()) pass.batch_memory_mib = std::stod(v);
    s.pass_rows = pass_rows_for(pass, s.cols, s.classes);
  } catch (const std::exception&) {
    // No folder yet (train prepares it), or flags train itself will refuse: the process alone.
    s.train_rows = s.eval_rows = s.cols = 0;
    s.batch = 0;
  }
  return s;
}

}  // namespace dpg::app
