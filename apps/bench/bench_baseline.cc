// Running the Gloo and OpenMPI all-reduce baselines as child processes with a bounded wait.
#include "apps/bench/bench_baseline.h"

#include <chrono>

#include "apps/bench/row_json.h"
#include "runtime/process/find.h"
#include "runtime/process/run.h"
#include "runtime/core/error.h"

namespace dpg::app {
namespace {

// The whole baseline run, all sizes together; the Gloo program's own deadline (240 s) is shorter,
// so that it normally cleans up its ranks itself.
constexpr std::chrono::seconds kBaselineTimeout{300};
// How long a SIGTERM'd baseline gets to stop its ranks before SIGKILL.
constexpr std::chrono::seconds kTerminateGrace{10};
constexpr int kMaxPeers = 64;  // tools/bench/bench_common.h: kMaxPeers

std::string join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    if (!s.empty()) s += ' ';
    s += a;
  }
  return s;
}

void check_args(const std::string& name, int peers, const std::vector<long long>& sizes_bytes,
                int warmup, int repeats_hint) {
  if (name != "gloo" && name != "mpi") {
    fail(Code::invalid_argument, "--baseline: expected gloo or mpi, got \"" + name + "\"");
  }
  if (peers < 1 || peers > kMaxPeers) {
    fail(Code::invalid_argument, "--peers: expected 1 to " + std::to_string(kMaxPeers) +
                                     " for a baseline, got " + std::to_string(peers));
  }
  if (sizes_bytes.empty()) fail(Code::invalid_argument, "--sizes: no sizes given");
  for (long long b : sizes_bytes) {
    if (b <= 0 || b % 4 != 0 || b / 4 > 0x7fffffffLL) {
      fail(Code::invalid_argument, "--sizes: " + std::to_string(b) +
                                       " bytes is not a positive multiple of 4 below 8 GiB");
    }
  }
  if (warmup < 0) fail(Code::invalid_argument, "--warmup: must be at least 0");
  if (repeats_hint < 1) fail(Code::invalid_argument, "--repeats: must be at least 1");
}

}  // namespace

std::vector<std::string> baseline_command(const std::string& name, int peers, bool pin,
                                          bool shared_memory) {
  const bool gloo = name == "gloo";
  const std::string program = gloo ? "dpgossip-bench-gloo" : "dpgossip-bench-mpi";
  proc::Search search;
  search.beside_self = {".", "../tools/bench"};  // an install; the build tree from build/apps
  const auto bench = proc::find_program(program, search);
  if (!bench) {
    fail(Code::failed_precondition,
         "--baseline " + name + ": " + program + " not found (looked in " +
             proc::where_searched(search) + "); it is built only when " +
             (gloo ? std::string("Gloo is found: install Debian's libgloo-dev")
                   : std::string("MPI is found: install Debian's libopenmpi-dev and openmpi-bin")) +
             ", then rebuild (meson setup --reconfigure build && ninja -C build)");
  }

  std::vector<std::string> argv;
  if (gloo) {
    argv = {bench->string(), "--peers", std::to_string(peers), "--pin", pin ? "1" : "0"};
  } else {
    const auto mpirun = proc::find_program("mpirun");
    if (!mpirun) {
      fail(Code::failed_precondition,
           "--baseline mpi: mpirun not found on PATH; install Debian's openmpi-bin");
    }
    // OpenMPI's TCP transport leaves out the loopback interface unless it is named; vader is
    // its shared-memory transport (single-copy through CMA where the kernel allows it).
    argv = {mpirun->string(), "--allow-run-as-root", "--oversubscribe", "--mca", "btl",
            shared_memory ? "self,vader" : "tcp,self"};
    if (!shared_memory) argv.insert(argv.end(), {"--mca", "btl_tcp_if_include", "lo"});
    argv.insert(argv.end(), {"-np", std::to_string(peers)});
    if (pin) {  // rank r on core r mod the core count, as dpgossip's --pin
      argv.insert(argv.end(), {"--map-by", "core:oversubscribe", "--bind-to", "core:overload-allowed"});
    }
    argv.push_back(bench->string());
  }
  return argv;
}

std::vector<bench::AllreduceRow> run_baseline(const std::string& name, int peers,
                                              const std::vector<long long>& sizes_bytes,
                                              int warmup, int repeats_hint, bool pin,
                                              bool shared_memory) {
  check_args(name, peers, sizes_bytes, warmup, repeats_hint);
  const bool gloo = name == "gloo";
  const std::string program = gloo ? "dpgossip-bench-gloo" : "dpgossip-bench-mpi";
  std::vector<std::string> argv = baseline_command(name, peers, pin, shared_memory);
  std::string sizes;
  for (long long b : sizes_bytes) {
    if (!sizes.empty()) sizes += ',';
    sizes += std::to_string(b);
  }
  argv.insert(argv.end(), {"--sizes", sizes, "--warmup", std::to_string(warmup), "--repeats",
                           std::to_string(repeats_hint)});

  // stdout: the rows; stderr passes through, so a failing baseline's own messages are seen.
  proc::RunOptions ro;
  ro.timeout = kBaselineTimeout;
  ro.grace = kTerminateGrace;
  ro.what = "bench: " + program;
  const proc::RunResult result = proc::run({argv, {}}, ro);
  if (!proc::succeeded(result.status)) {
    fail(Code::failed_precondition, "bench: the baseline failed (" +
                                        proc::describe_status(result.status) +
                                        "; its messages are above): " + join(argv));
  }
  const std::string backend = gloo ? "gloo" : "openmpi";
  std::vector<bench::AllreduceRow> rows = bench::parse_allreduce_rows(result.out, program + " output");
  for (size_t i = 0; i < rows.size(); ++i) {
    const bench::AllreduceRow& r = rows[i];
    const std::string where = program + " row " + std::to_string(i + 1);
    if (i >= sizes_bytes.size() || r.backend != backend || r.peers != peers ||
        r.bytes != sizes_bytes[i]) {
      fail(Code::data_loss, where + ": unexpected row " + bench::to_json_line(r) +
                                " (expected backend " + backend + ", " + std::to_string(peers) +
                                " peers, " +
                                (i < sizes_bytes.size() ? std::to_string(sizes_bytes[i]) + " bytes"
                                                        : std::string("no more rows")) +
                                ")");
    }
    if (!r.ok) {
      fail(Code::failed_precondition, where + ": the " + backend + " all-reduce gave a wrong sum");
    }
  }
  if (rows.size() != sizes_bytes.size()) {
    fail(Code::data_loss, program + " printed " + std::to_string(rows.size()) + " rows for " +
                              std::to_string(sizes_bytes.size()) + " sizes: " + join(argv));
  }
  return rows;
}

}  // namespace dpg::app
