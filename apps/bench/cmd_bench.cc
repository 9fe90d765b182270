// dpgossip bench step: samples/s of the non-private and the DP-SGD step of an MLP, on the CPU or
// a GPU (--device), optionally side by side with PyTorch's step run by tools/bench_torch_mlp.py in
// the same command (its plain step on the CPU; its plain and DP steps on a GPU).
#include <algorithm>
#include <functional>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/core/bench_row.h"
#include "apps/bench/bench_options.h"
#include "apps/bench/row_json.h"
#include "apps/device_backend.h"
#include "apps/commands.h"
#include "apps/parse.h"
#include "runtime/process/find.h"
#include "runtime/process/run.h"
#include "dp/mechanism.h"
#include "runtime/core/error.h"
#include "runtime/core/json_io.h"
#include "runtime/core/rng.h"
#include "runtime/core/train_config.h"
#include "runtime/model/blas_threads.h"
#include "runtime/model/device_mlp.h"
#include "runtime/model/gemm.h"
#include "runtime/model/mlp.h"
#include "runtime/train/gradient.h"
#include "runtime/train/optimizer.h"
#include "runtime/train/run_setup.h"
#include "runtime/train/run_state.h"

namespace dpg::app {
namespace {

using bench::median;
using Row = bench::StepRow;

// Median samples/s of `step` over o.repeats timed windows of about o.seconds / o.repeats each,
// after a warm-up of 10 steps and a quarter of the timed seconds, as tools/bench_torch_mlp.py does.
double rate_of_steps(const std::function<void()>& step, const StepBenchOptions& o) {
  const auto warm_until = std::chrono::steady_clock::now() +
                          std::chrono::duration<double>(o.seconds / 4);
  for (int i = 0; i < 10 || std::chrono::steady_clock::now() < warm_until; ++i) step();
  std::vector<double> rates;
  const double window = o.seconds / o.repeats;
  for (int r = 0; r < o.repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    long steps = 0;
    double elapsed = 0;
    do {
      step();
      ++steps;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } while (elapsed < window && steps < 1000000);
    rates.push_back(static_cast<double>(steps) * o.batch / elapsed);
  }
  return median(rates);
}

// The CPU step's median samples/s (rate_of_steps), on the state a run builds (train::plan_run
// and build_state: the model, the mechanism and the optimiser of `dpgossip train`): one peer whose
// o.batch random rows are its whole batch every step.
// mode: "sgd", "dpsgd" or "dpsgd-secure" (the DP step with secure noise).
double time_steps(const model::MlpSpec& spec, const std::string& mode, const StepBenchOptions& o,
                  int threads) {
  train::RunInputs in;
  TrainConfig& c = in.config;
  c.hidden = spec.hidden;
  c.activation = spec.activation;
  c.dp = mode != "sgd";
  c.secure_noise = mode == "dpsgd-secure";
  c.clip_norm = 1.0;
  c.noise_multiplier = 1.0;
  c.batch_size = o.batch;
  c.epochs = 1;
  c.lr = 1e-3;
  c.momentum = 0.9;
  c.threads = threads;
  data::Dataset& d = in.data.train;
  d.rows = static_cast<std::size_t>(o.batch);
  d.cols = static_cast<std::size_t>(spec.inputs);
  d.num_classes = spec.classes;
  Rng rng(2);
  d.features.resize(d.rows * d.cols);
  for (auto& v : d.features) v = static_cast<float>(rng.normal());
  for (std::size_t i = 0; i < d.rows; ++i) {
    d.labels.push_back(static_cast<std::int32_t>(rng.below(spec.classes)));
  }
  train::check_run(in);
  const dp::PrivacyPlan plan = train::plan_run(in);
  const std::unique_ptr<train::RunState> s = train::build_state(in, plan);
  s->ws.resize(s->spec, d.rows);
  std::copy(d.features.begin(), d.features.end(), s->ws.input().begin());
  train::StepStats stats;
  auto step = [&] {
    auto g = train::private_gradient(s->model, s->ws, d.labels, s->mechanism, s->buffers, stats);
    s->sgd.apply(s->model.params(), g);
  };
  return rate_of_steps(step, o);
}

// The same step on GPU `index` (runtime/model/device_mlp.h): the batch resident on the device,
// forward, backward, ghost-norm clipping, the clipped sum, Philox noise and the SGD update all
// there; nothing crosses to the host but the step's counters. Median samples/s as time_steps.
double time_device_steps(const model::MlpSpec& spec, const std::string& mode,
                         const StepBenchOptions& o, int index) {
  const model::Mlp init(spec, 1);
  auto dev = device_backend("--device cuda").make_mlp(spec, index, init.params());
  Rng rng(2);
  std::vector<float> x(static_cast<std::size_t>(o.batch) * spec.inputs);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  std::vector<std::int32_t> labels(o.batch);
  for (auto& l : labels) l = static_cast<std::int32_t>(rng.below(spec.classes));
  dev->upload_rows(x, labels);
  std::vector<std::uint32_t> rows(o.batch);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::uint32_t>(i);
  model::DeviceDpOptions dp{.enabled = mode != "sgd", .clip_norm = 1.0f, .noise_multiplier = 1.0,
                            .expected_batch = static_cast<double>(o.batch), .seed = 3};
  const model::DeviceSgdOptions sgd{.lr = 1e-3, .momentum = 0.9};
  long long t = 0;
  auto step = [&] {
    dev->gradient(rows, t++, dp);  // returns once the device is done
    dev->sgd_step(sgd);
  };
  return rate_of_steps(step, o);
}

// The device of --device as rows name it: "cpu" or "cuda:N" ("cuda" is GPU 0).
std::string device_name(const StepBenchOptions& o) {
  const DeviceChoice d = parse_device(o.device);
  return d.cuda ? "cuda:" + std::to_string(std::max(d.index, 0)) : "cpu";
}
// PyTorch's modes: its plain step on the CPU (Debian's torch may lack torch.func); on a GPU also
// its DP step (per-sample gradients by torch.func.vmap), the point of comparison.
std::string torch_modes(const StepBenchOptions& o) {
  return parse_device(o.device).cuda ? "sgd,dpsgd" : "sgd";
}

// The PyTorch baseline for one thread count, run without a shell: python, the script, its flags.
std::vector<Row> torch_rows(const StepBenchOptions& o, int threads) {
  // The script as given (from the repository root), else in the repository the executable was
  // built in (build/apps/../..).
  proc::Search search;
  search.beside_self = {"../.."};
  search.path = false;
  search.executable = false;
  const auto script = proc::find_program(o.torch_script, search);
  if (!script)
    fail(Code::not_found, "--torch-script: " + o.torch_script + " not found (looked in the " +
                              "working folder and " + proc::where_searched(search) + ")");
  std::ostringstream seconds;
  seconds << o.seconds;
  proc::Command cmd{{o.python, script->string(), "--widths", o.widths, "--activation",
                     o.activation, "--threads", std::to_string(threads), "--batch",
                     std::to_string(o.batch), "--seconds", seconds.str(), "--repeats",
                     std::to_string(o.repeats), "--device", device_name(o), "--modes",
                     torch_modes(o)},
                    {{"OMP_WAIT_POLICY", "PASSIVE"}}};
  proc::RunOptions ro;
  // Importing torch takes seconds on a busy machine; the timed part is 1.25 x --seconds.
  ro.timeout = std::chrono::milliseconds(120'000 + static_cast<long long>(o.seconds * 2000));
  ro.what = "bench: the PyTorch baseline";
  const proc::RunResult r = proc::run(cmd, ro);
  if (!proc::succeeded(r.status)) {
    fail(Code::failed_precondition, "bench: the PyTorch baseline failed (" +
                                        proc::describe_status(r.status) + "; " + o.torch_script +
                                        " needs Debian's python3-torch; its messages are above)");
  }
  std::vector<Row> rows = bench::parse_step_rows(r.out, o.torch_script + " output");
  const std::size_t expected = torch_modes(o) == "sgd" ? 1 : 2;
  bool ok = rows.size() == expected;
  for (const Row& row : rows) {
    ok = ok && row.backend == "torch" && row.threads == threads && row.batch == o.batch &&
         row.device == device_name(o);
  }
  if (!ok)
    fail(Code::data_loss, o.torch_script + " printed " + std::to_string(rows.size()) +
                              " rows; expected " + std::to_string(expected) + " torch rows for " +
                              std::to_string(threads) + " threads, batch " +
                              std::to_string(o.batch) + " on " + device_name(o) + ": " + r.out);
  return rows;
}

void print_rows(const std::vector<Row>& rows, bool json) {
  if (json) {
    for (const auto& r : rows) std::cout << bench::to_json_line(r) << "\n";
    return;
  }
  std::cout << std::left << std::setw(10) << "backend" << std::setw(9) << "device" << std::setw(14)
            << "mode" << std::setw(9) << "threads" << std::setw(7) << "batch" << "samples/s\n";
  for (const auto& r : rows) {
    std::cout << std::left << std::setw(10) << r.backend << std::setw(9) << r.device
              << std::setw(14) << r.mode << std::setw(9)
              << r.threads << std::setw(7) << r.batch << std::fixed << std::setprecision(0)
              << r.samples_per_second << "\n";
  }
}

double rate_of(const std::vector<Row>& rows, const std::string& backend, const std::string& mode,
               int threads) {
  for (const auto& r : rows) {
    if (r.backend == backend && r.mode == mode && r.threads == threads) return r.samples_per_second;
  }
  return 0.0;
}

// Each ratio is taken within a round, between rows run back to back, then the median over rounds
// is printed with the range.
void print_ratios(const std::vector<std::vector<Row>>& runs, const std::vector<int>& threads,
                  bool torch, bool secure) {
  auto line = [&](const char* what, const std::function<double(const std::vector<Row>&)>& f) {
    std::vector<double> v;
    for (const auto& run : runs) v.push_back(f(run));
    std::cout << what << " " << std::setprecision(3) << median(v) << " ("
              << *std::min_element(v.begin(), v.end()) << "-"
              << *std::max_element(v.begin(), v.end()) << ")";
  };
  for (int t : threads) {
    std::cout << "threads " << t << ":";
    line(" dpsgd step / sgd step (time)", [&](const std::vector<Row>& r) {
      return rate_of(r, "dpgossip", "sgd", t) / rate_of(r, "dpgossip", "dpsgd", t);
    });
    if (secure) {
      line("; secure-noise dpsgd step / dpsgd step (time)", [&](const std::vector<Row>& r) {
        return rate_of(r, "dpgossip", "dpsgd", t) / rate_of(r, "dpgossip", "dpsgd-secure", t);
      });
    }
    if (torch && rate_of(runs.front(), "torch", "dpsgd", t) > 0) {
      line("; dpgossip dpsgd / torch dpsgd", [&](const std::vector<Row>& r) {
        return rate_of(r, "dpgossip", "dpsgd", t) / rate_of(r, "torch", "dpsgd", t);
      });
    }
    if (torch) {
      line("; dpgossip dpsgd / torch sgd", [&](const std::vector<Row>& r) {
        return rate_of(r, "dpgossip", "dpsgd", t) / rate_of(r, "torch", "sgd", t);
      });
      line("; dpgossip sgd / torch sgd", [&](const std::vector<Row>& r) {
        return rate_of(r, "dpgossip", "sgd", t) / rate_of(r, "torch", "sgd", t);
      });
    }
    std::cout << "\n";
  }
}

void run_step_bench(const StepBenchOptions& o) {
  check(o);
  model::MlpSpec spec;
  const auto widths = parse_int_list(o.widths, "--widths");
  spec.inputs = widths.front();
  spec.classes = widths.back();
  spec.hidden.assign(widths.begin() + 1, widths.end() - 1);
  spec.activation = parse_enum<Activation>(o.activation);
  const auto threads = parse_int_list(o.threads, "--threads");
  const std::string device = device_name(o);
  const int gpu = parse_device(o.device).cuda ? std::max(parse_device(o.device).index, 0) : -1;
  // Each round runs, per thread count, dpgossip's rows and then PyTorch's, so that a slow spell
  // of the machine (the two vCPUs of this VM sometimes share one core's vector units) lands on
  // both sides alike; rows are medians over rounds, ratios are taken within a round.
  std::vector<std::vector<Row>> runs;
  for (int round = 0; round < o.rounds; ++round) {
    std::vector<Row> rows;
    for (int t : threads) {
      model::set_blas_threads(t);
      std::vector<std::string> modes = {"sgd", "dpsgd"};
      if (o.secure_noise) modes.push_back("dpsgd-secure");
      for (const auto& mode : modes) {
        rows.push_back({"dpgossip", device, mode, t, o.batch,
                        gpu >= 0 ? time_device_steps(spec, mode, o, gpu)
                                 : time_steps(spec, mode, o, t)});
      }
      if (o.baseline == "torch") {
        const auto torch = torch_rows(o, t);
        rows.insert(rows.end(), torch.begin(), torch.end());
      }
    }
    runs.push_back(std::move(rows));
  }
  std::vector<Row> rows = runs.front();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::vector<double> v;
    for (const auto& run : runs) v.push_back(run[i].samples_per_second);
    rows[i].samples_per_second = median(v);
  }
  if (!o.json && gpu >= 0) {
    std::cout << "dpgossip's step on " << device << " (cuBLAS, Thrust, cuRAND Philox)\n";
  } else if (!o.json) {
    std::cout << "dpgossip's GEMMs:";
    for (int t : threads) {
      std::cout << (t == threads.front() ? " " : ", ") << model::gemm_library(t) << " at " << t << (t == 1 ? " thread" : " threads");
    }
    std::cout << "\n";
  }
  print_rows(rows, o.json);
  if (!o.json) print_ratios(runs, threads, o.baseline == "torch", o.secure_noise);
}

}  // namespace

void add_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks that print figures");
  bench->require_subcommand(1);
  auto o = std::make_shared<StepBenchOptions>();
  auto* step = bench->add_subcommand("step", "samples/s of the SGD and DP-SGD step of an MLP");
  add_step_flags(*step, *o);
  step->callback([o] { run_step_bench(*o); });
  add_bench_allreduce(*bench);
  add_bench_link(*bench);
  add_bench_startup(*bench);
}

}  // namespace dpg::app
