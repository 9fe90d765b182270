// dpgossip bench startup: how long N peers take from the start of a command to the end of their
// first all-reduce and their exit, the figure a user waits for before any training: dpgossip as
// `dpgossip launch --peers N -- bench allreduce` of one 4-byte all-reduce, and beside it (with
// --baseline) Gloo's and OpenMPI's programs of `bench allreduce --baseline` started the same way
// (Gloo's launcher, mpirun) for the same one all-reduce. Each start is timed from this process,
// as wall time around the whole child command, --repeats times; rows give the median, min and
// max, and a ratio row dpgossip's median over each baseline's.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "apps/bench/bench_baseline.h"
#include "apps/bench/bench_options.h"
#include "apps/commands.h"
#include "runtime/core/bounds.h"
#include "runtime/core/error.h"
#include "runtime/core/json_io.h"
#include "runtime/process/find.h"
#include "runtime/process/run.h"

namespace dpg::app {
namespace {

struct Timing {
  std::string backend;
  std::vector<double> seconds;  // sorted
  double median() const { return seconds[seconds.size() / 2]; }
};

// The backend's command: N peers, one all-reduce of 4 bytes, nothing untimed before it.
std::vector<std::string> command_of(const std::string& backend, const StartupBenchOptions& o) {
  const std::vector<std::string> one = {"--sizes", "4", "--warmup", "0", "--repeats", "1"};
  std::vector<std::string> argv;
  if (backend == "dpgossip") {
    argv = {proc::self_path().string(), "launch", "--peers", std::to_string(o.peers), "--",
            "bench", "allreduce", "--rounds", "1", "--transport", o.transport};
  } else {
    argv = baseline_command(backend, o.peers, false, o.transport != "tcp");
  }
  argv.insert(argv.end(), one.begin(), one.end());
  return argv;
}

Timing time_starts(const std::string& backend, const StartupBenchOptions& o) {
  Timing t{backend, {}};
  const std::vector<std::string> argv = command_of(backend, o);
  proc::RunOptions ro;
  ro.out = proc::Stdio::capture();
  ro.err = proc::Stdio::capture();  // its progress lines; printed when it fails
  ro.timeout = std::chrono::milliseconds(static_cast<long long>(o.timeout_s * 1000));
  ro.what = "bench startup: " + backend;
  for (int i = 0; i < o.repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const proc::RunResult r = proc::run({argv, {}}, ro);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!proc::succeeded(r.status)) {
      std::cerr << r.err;
      fail(Code::failed_precondition, "bench startup: " + backend + " failed (" +
                                          proc::describe_status(r.status) +
                                          "; its messages are above): " + argv[0]);
    }
    t.seconds.push_back(s);
  }
  std::sort(t.seconds.begin(), t.seconds.end());
  return t;
}

void run_startup_bench(const StartupBenchOptions& o) {
  check(o);
  std::vector<std::string> backends = {"dpgossip"};
  if (o.baseline == "gloo" || o.baseline == "gloo,mpi") backends.push_back("gloo");
  if (o.baseline == "mpi" || o.baseline == "gloo,mpi") backends.push_back("mpi");
  std::vector<Timing> times;
  for (const auto& b : backends) times.push_back(time_starts(b, o));
  for (const Timing& t : times) {
    if (o.json) {
      std::cout << Json{{"backend", t.backend}, {"peers", o.peers}, {"transport", o.transport},
                        {"repeats", o.repeats}, {"median_s", t.median()},
                        {"min_s", t.seconds.front()}, {"max_s", t.seconds.back()}}.dump()
                << "\n";
    } else {
      std::cout << t.backend << ": " << o.peers << " peers, start to first all-reduce and exit: "
                << "median " << fixed_text(t.median(), 3) << " s (min "
                << fixed_text(t.seconds.front(), 3) << ", max " << fixed_text(t.seconds.back(), 3)
                << ", " << o.repeats << " starts)\n";
    }
  }
  for (std::size_t i = 1; i < times.size(); ++i) {
    const double ratio = times[0].median() / times[i].median();
    if (o.json) {
      std::cout << Json{{"ratio", "dpgossip/" + times[i].backend}, {"median", ratio}}.dump()
                << "\n";
    } else {
      std::cout << "dpgossip / " << times[i].backend << ": " << fixed_text(ratio, 3)
                << " of its median time\n";
    }
  }
}

}  // namespace

void add_bench_startup(CLI::App& bench) {
  auto o = std::make_shared<StartupBenchOptions>();
  auto* c = bench.add_subcommand(
      "startup", "seconds from a command's start to its peers' first all-reduce (and exit)");
  add_startup_flags(*c, *o);
  c->callback([o] { run_startup_bench(*o); });
}

}  // namespace dpg::app
