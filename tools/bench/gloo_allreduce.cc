// dpgossip-bench-gloo: Gloo's ring all-reduce of float32 sums on N processes on 127.0.0.1, the
// baseline that `dpgossip bench allreduce --baseline gloo` runs beside dpgossip's own ring.
//
// The algorithm is gloo::allreduce() with AllreduceOptions::Algorithm::RING: the reduce-scatter
// then all-gather ring over 1 MiB segments (two in flight) that PyTorch's Gloo backend runs for CPU
// tensors. It moves 2(N-1)/N of the buffer per rank, as dpgossip's ring does, so the bus-bandwidth
// factor 2(N-1)/N applies. (The older class gloo::AllreduceRing<float> forwards the whole buffer
// N-1 times and would be an unfair comparison at large sizes.)
//
// The launcher forks the N ranks before any thread exists (Gloo's TCP device starts a loop thread),
// waits for them with a deadline, and kills only its own children when they overrun or one fails.
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
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

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

// Waits for the ranks in `pids` (-1: not started), filling `status`. Once one fails the rest get
// a short grace to report their own errors; past it, past the deadline or on a signal, the ones
// still running are killed (only these PIDs). Returns true when all exited with status 0;
// otherwise `reason` says why, unless it was already set.
bool wait_for_ranks(const std::vector<pid_t>& started, std::vector<int>& status, double timeout_s,
                    const char*& reason) {
  std::vector<pid_t> pids = started;
  const auto timeout = std::chrono::duration<double>(timeout_s);
  Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  bool ok = true;
  int running = 0;
  for (pid_t p : pids) running += p > 0;
  while (running > 0) {
    bool reaped = false;
    for (size_t rank = 0; rank < pids.size(); ++rank) {
      int st = 0;
      if (pids[rank] <= 0 || waitpid(pids[rank], &st, WNOHANG) != pids[rank]) continue;
      status[rank] = st;
      pids[rank] = 0;
      --running;
      reaped = true;
      if (ok && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        ok = false;
        if (reason == nullptr) reason = "a rank failed";
        deadline = std::min<Clock::time_point>(deadline, Clock::now() + std::chrono::seconds(2));
      }
    }
    if (running == 0) break;
    const bool signalled = g_signal != 0;
    const bool late = Clock::now() > deadline;
    if (signalled || late) {
      if (reason == nullptr) reason = signalled ? "interrupted by a signal" : "timed out";
      for (size_t rank = 0; rank < pids.size(); ++rank) {
        if (pids[rank] <= 0) continue;
        kill(pids[rank], SIGKILL);
        int st = 0;
        while (waitpid(pids[rank], &st, 0) < 0 && errno == EINTR) {
        }
        status[rank] = st;
        pids[rank] = 0;
      }
      return false;
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return ok;
}

const char* describe(int status, char* buf, size_t len) {
  if (WIFEXITED(status)) std::snprintf(buf, len, "exit status %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status)) std::snprintf(buf, len, "signal %d", WTERMSIG(status));
  else std::snprintf(buf, len, "status %d", status);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (const int rc = dpg_bench::parse_args(argc, argv, true, a); rc != 0) return rc == 1 ? 0 : 2;

  char dir_template[] = "/tmp/dpgossip-bench-gloo-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) {
    std::perror("dpgossip-bench-gloo: mkdtemp");
    return 1;
  }
  const std::string store_dir = dir;

  // The handlers only set a flag; each child puts the defaults back before doing anything.
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);

  std::fflush(nullptr);
  const pid_t parent = getpid();
  std::vector<pid_t> pids(a.peers, -1);
  std::vector<int> status(a.peers, -1);  // wait status; -1: never started
  bool failed = false;
  for (int rank = 0; rank < a.peers; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      signal(SIGTERM, SIG_DFL);
      signal(SIGINT, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the launcher
      if (getppid() != parent) _exit(1);
      if (a.pin) {  // as dpgossip's --pin and mpirun's --bind-to core: rank r on CPU r mod count
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(rank % static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)), &set);
        sched_setaffinity(0, sizeof set, &set);
      }
      const int rc = run_rank(rank, a, store_dir);
      std::fflush(nullptr);
      _exit(rc);
    }
    if (pid < 0) {
      std::perror("dpgossip-bench-gloo: fork");
      failed = true;
      break;
    }
    pids[rank] = pid;
  }

  if (failed) {  // the ranks already started would wait for the missing ones until their timeout
    for (pid_t p : pids) {
      if (p > 0) kill(p, SIGKILL);
    }
  }
  const char* reason = failed ? "fork failed" : nullptr;
  failed = !wait_for_ranks(pids, status, a.timeout_s, reason) || failed;
  std::error_code ec;
  std::filesystem::remove_all(store_dir, ec);
  if (failed) {
    std::fprintf(stderr, "dpgossip-bench-gloo: %s (timeout %.0f s)", reason ? reason : "failed",
                 a.timeout_s);
    char buf[64];
    for (int rank = 0; rank < a.peers; ++rank) {
      std::fprintf(stderr, "%s rank %d: %s", rank == 0 ? ";" : ",", rank,
                   status[rank] >= 0 ? describe(status[rank], buf, sizeof buf) : "not started");
    }
    std::fprintf(stderr, "\n");
    return 1;
  }
  return 0;
}
