// dpgossip-bench-gloo: Gloo's ring all-reduce of float32 sums on N processes on 127.0.0.1, the
// baseline that `dpgossip bench allreduce --baseline gloo` runs beside dpgossip's own ring.
//
// The algorithm is gloo::allreduce() with AllreduceOptions::Algorithm::RING: the reduce-scatter
// then all-gather ring over 1 MiB segments (two in flight) that PyTorch's Gloo backend runs for CPU
// tensors. It moves 2(N-1)/N of the buffer per rank, as dpgossip's ring does, so the bus-bandwidth
// factor 2(N-1)/N applies. (The older class gloo::AllreduceRing<float> forwards the whole buffer
// N-1 times and would be an unfair comparison at large sizes.)
//
// The launcher starts the N ranks as copies of this program (`--rank r --store DIR`, through
// dpgossip's process library: no shell, each tied to the launcher's life), waits for them with a
// deadline, and kills only its own children when they overrun, one fails, or it is signalled.
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "runtime/process/find.h"
#include "runtime/process/process.h"
#include "runtime/process/signals.h"
#include "tools/bench/bench_common.h"

namespace {

using Clock = std::chrono::steady_clock;
using dpg_bench::Args;

void sum_floats(void* c, const void* a, const void* b, size_t n) {
  gloo::sum<float>(c, a, b, n);
}

// Per operation (and rendezvous): a lost peer fails fast instead of using up the whole run.
std::chrono::milliseconds op_timeout(const Args& a) {
  return std::chrono::milliseconds(static_cast<long long>(std::min(a.timeout_s, 60.0) * 1000));
}

// One size: warm-up, a barrier, then `repeats` timed all-reduces, each timed alone on this rank
// (no barrier between them), then the check, agreed on by all ranks through one more all-reduce.
// Returns false when any rank saw a wrong element.
bool run_size(const std::shared_ptr<gloo::Context>& ctx, const Args& a, long long bytes,
              uint32_t tag) {
  const int rank = ctx->rank;
  const int n = ctx->size;
  const size_t count = static_cast<size_t>(bytes / 4);
  std::vector<float> in(count), out(count, 0.0f);
  dpg_bench::fill_input(in, rank);

  // Out of place: the input stays the same across repeats, so the last output can be checked.
  gloo::AllreduceOptions opts(ctx);
  opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  opts.setInput(in.data(), count);
  opts.setOutput(out.data(), count);
  opts.setReduceFunction(&sum_floats);
  opts.setTag(tag);
  opts.setTimeout(op_timeout(a));

  const int warmup = dpg::bench::repeats_for_size(bytes, a.warmup);  // scaled as the timed count
  for (int i = 0; i < warmup; ++i) gloo::allreduce(opts);
  gloo::BarrierOptions barrier(ctx);
  barrier.setTag(tag);
  barrier.setTimeout(op_timeout(a));
  gloo::barrier(barrier);

  const int repeats = dpg::bench::repeats_for_size(bytes, a.repeats);
  std::vector<double> times_us;
  times_us.reserve(repeats);
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    gloo::allreduce(opts);
    times_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }

  float bad = static_cast<float>(dpg_bench::count_mismatches(out, n, rank, bytes, "gloo") > 0);
  float bad_ranks = 0;
  gloo::AllreduceOptions check(ctx);
  check.setInput(&bad, 1);
  check.setOutput(&bad_ranks, 1);
  check.setReduceFunction(&sum_floats);
  check.setTag(tag);
  check.setTimeout(op_timeout(a));
  gloo::allreduce(check);

  if (rank == 0) dpg_bench::print_row("gloo", n, bytes, times_us, bad_ranks == 0);
  return bad_ranks == 0;
}

int run_rank(int rank, const Args& a, const std::string& store_dir) {
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    attr.ai_family = AF_INET;
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, a.peers);
    ctx->setTimeout(op_timeout(a));
    gloo::rendezvous::FileStore files(store_dir);
    gloo::rendezvous::PrefixStore store("dpgossip-bench-gloo", files);
    ctx->connectFullMesh(store, dev);
    bool ok = true;
    uint32_t tag = 1;
    for (long long bytes : a.sizes_bytes) ok = run_size(ctx, a, bytes, tag++) && ok;
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo rank %d: %s\n", rank, e.what());
    return 1;
  }
}

// Waits for the ranks, at most `timeout_s`. Once one fails the rest get a short grace to report
// their own errors; past it, past the deadline or on a signal, the ones still running are killed
// (only these PIDs). Returns true when all exited with status 0; otherwise `reason` says why,
// unless it was already set.
bool wait_for_ranks(std::vector<dpg::proc::Process>& ranks, double timeout_s,
                    dpg::proc::SignalPipe& signals, const char*& reason) {
  const auto timeout = std::chrono::duration<double>(timeout_s);
  Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  bool ok = true;
  while (true) {
    size_t running = 0;
    for (auto& r : ranks) {
      const auto status = r.poll();
      if (!status) {
        ++running;
      } else if (ok && !dpg::proc::succeeded(*status)) {
        ok = false;
        if (reason == nullptr) reason = "a rank failed";
        deadline = std::min<Clock::time_point>(deadline, Clock::now() + std::chrono::seconds(2));
      }
    }
    if (running == 0) return ok;
    const bool signalled = !signals.take().empty();
    if (signalled || Clock::now() > deadline) {
      if (reason == nullptr) reason = signalled ? "interrupted by a signal" : "timed out";
      for (auto& r : ranks) r.signal(SIGKILL);
      for (auto& r : ranks) r.wait_until(Clock::now() + std::chrono::seconds(10));
      return false;
    }
    pollfd p{signals.fd(), POLLIN, 0};
    (void)::poll(&p, 1, 5);
  }
}

// One rank, started by the launcher below.
int rank_main(const Args& a) {
  if (a.pin) {  // as dpgossip's --pin and mpirun's --bind-to core: rank r on CPU r mod count
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(a.rank % static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)), &set);
    sched_setaffinity(0, sizeof set, &set);
  }
  const int rc = run_rank(a.rank, a, a.store);
  std::fflush(nullptr);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (const int rc = dpg_bench::parse_args(argc, argv, true, a); rc != 0) return rc == 1 ? 0 : 2;
  if (a.rank >= 0 || !a.store.empty()) {
    if (a.rank < 0 || a.store.empty() || a.rank >= a.peers) {
      std::fprintf(stderr, "dpgossip-bench-gloo: --rank and --store go together, rank < --peers\n");
      return 2;
    }
    return rank_main(a);
  }

  char dir_template[] = "/tmp/dpgossip-bench-gloo-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) {
    std::perror("dpgossip-bench-gloo: mkdtemp");
    return 1;
  }
  const std::string store_dir = dir;
  std::vector<dpg::proc::Process> ranks;
  std::vector<std::optional<int>> status(a.peers);  // wait status; none: never started or stuck
  const char* reason = nullptr;
  bool failed = false;
  try {
    dpg::proc::SignalPipe signals({SIGTERM, SIGINT, SIGHUP});
    std::vector<std::string> base(argv, argv + argc);
    base.front() = dpg::proc::self_path().string();
    for (int rank = 0; rank < a.peers; ++rank) {
      std::vector<std::string> args = base;
      args.insert(args.end(), {"--rank", std::to_string(rank), "--store", store_dir});
      dpg::proc::SpawnOptions so;
      so.what = "gloo rank " + std::to_string(rank);
      so.stop_grace = std::chrono::seconds(2);
      ranks.push_back(dpg::proc::Process::spawn({args, {}}, so));
    }
    failed = !wait_for_ranks(ranks, a.timeout_s, signals, reason);
  } catch (const std::exception& e) {
    // A rank that cannot start: those started would wait for it until their timeout.
    std::fprintf(stderr, "dpgossip-bench-gloo: %s\n", e.what());
    reason = "a rank could not start";
    failed = true;
    for (auto& r : ranks) r.signal(SIGKILL);
  }
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    ranks[rank].wait_until(Clock::now() + std::chrono::seconds(10));
    status[rank] = ranks[rank].status();
  }
  std::error_code ec;
  std::filesystem::remove_all(store_dir, ec);
  if (failed) {
    std::fprintf(stderr, "dpgossip-bench-gloo: %s (timeout %.0f s)", reason ? reason : "failed",
                 a.timeout_s);
    for (int rank = 0; rank < a.peers; ++rank) {
      std::fprintf(stderr, "%s rank %d: %s", rank == 0 ? ";" : ",", rank,
                   status[rank] ? dpg::proc::describe_status(*status[rank]).c_str()
                                : rank < static_cast<int>(ranks.size()) ? "did not exit"
                                                                        : "not started");
    }
    std::fprintf(stderr, "\n");
    return 1;
  }
  return 0;
}
