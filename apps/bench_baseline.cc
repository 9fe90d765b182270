// Running the Gloo and OpenMPI all-reduce baselines as child processes with a bounded wait, and
// the row arithmetic both sides of `dpgossip bench allreduce` share.
#include "apps/bench_baseline.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "runtime/core/error.h"

extern char** environ;

namespace dpg::app {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

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

bool is_executable(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

std::vector<fs::path> path_dirs() {
  std::vector<fs::path> dirs;
  const char* path = std::getenv("PATH");
  std::string rest = path ? path : "";
  std::size_t start = 0;
  while (start <= rest.size()) {
    const std::size_t colon = std::min(rest.find(':', start), rest.size());
    if (colon > start) dirs.emplace_back(rest.substr(start, colon - start));
    start = colon + 1;
  }
  return dirs;
}

// Beside the running dpgossip, then ../tools/bench/ from there (build/apps -> build/tools/bench),
// then PATH. `tried` collects the places looked in, for the error message.
std::optional<fs::path> find_beside_self(const std::string& name, std::vector<std::string>& tried) {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path dir = exe.parent_path();
    const fs::path build_tree = (dir / ".." / "tools" / "bench" / name).lexically_normal();
    for (const fs::path& p : {dir / name, build_tree}) {
      tried.push_back(p.parent_path().string());
      if (is_executable(p)) return p;
    }
  }
  tried.push_back("PATH");
  for (const auto& d : path_dirs()) {
    if (is_executable(d / name)) return d / name;
  }
  return std::nullopt;
}

std::optional<fs::path> find_on_path(const std::string& name) {
  for (const auto& d : path_dirs()) {
    if (is_executable(d / name)) return d / name;
  }
  return std::nullopt;
}

std::string join_tried(const std::vector<std::string>& tried) {
  std::string s;
  for (std::size_t i = 0; i < tried.size(); ++i) {
    if (i > 0) s += i + 1 == tried.size() ? " and " : ", ";
    s += tried[i];
  }
  return s;
}

// A started child process: killed (SIGTERM, then SIGKILL after a grace period) and reaped if
// still running when this goes out of scope, so no exception path leaves it behind. Only this
// one PID is ever signalled.
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0) terminate();
  }

  // The exit status once the child has exited, or nullopt at the deadline.
  std::optional<int> wait_until(Clock::time_point deadline) {
    for (;;) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return status;
      }
      if (r < 0 && errno == ECHILD) {  // reaped elsewhere: the outcome is unknown, so a failure
        pid_ = -1;
        return 255 << 8;
      }
      if (Clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  void terminate() {
    if (pid_ <= 0) return;  // never kill(-1, ...)
    ::kill(pid_, SIGTERM);
    if (wait_until(Clock::now() + kTerminateGrace)) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

 private:
  pid_t pid_;
};

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

// Runs argv[0] (a full path) with stdout captured and stderr passed through to ours, and returns
// what it printed. Throws deadline_exceeded past `timeout`, failed_precondition on a failure exit.
std::string run_captured(const std::vector<std::string>& argv, std::chrono::seconds timeout) {
  const std::string cmd = join(argv);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    fail(Code::failed_precondition, "bench: pipe for " + cmd + ": " + std::strerror(errno));
  }
  Fd read_end{fds[0]};
  Fd write_end{fds[1]};

  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, write_end.fd, STDOUT_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, cargv[0], &actions, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    fail(Code::failed_precondition, "bench: cannot start " + cmd + ": " + std::strerror(rc));
  }
  Child child(pid);
  ::close(write_end.fd);
  write_end.fd = -1;

  const auto start = Clock::now();
  const auto deadline = start + timeout;
  auto timed_out = [&] {
    child.terminate();
    fail(Code::deadline_exceeded,
         "bench: " + cmd + " did not finish within " + std::to_string(timeout.count()) +
             " s; it was stopped (SIGTERM, then SIGKILL)");
  };

  std::string out;
  char buf[4096];
  for (;;) {
    using std::chrono::milliseconds;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) timed_out();
    pollfd p{read_end.fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) {
      fail(Code::internal, "bench: poll on the output of " + cmd + ": " + std::strerror(errno));
    }
    if (ready <= 0) continue;
    const ssize_t n = ::read(read_end.fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR && errno != EAGAIN) {
      fail(Code::internal, "bench: reading the output of " + cmd + ": " + std::strerror(errno));
    }
  }
  const auto status = child.wait_until(deadline);
  if (!status) timed_out();
  if (!(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)) {
    fail(Code::failed_precondition, "bench: the baseline failed (" + describe_status(*status) +
                                        "; its messages are above): " + cmd);
  }
  return out;
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

Json to_json(const AllreduceRow& r) {
  return {{"backend", r.backend},       {"peers", r.peers},           {"bytes", r.bytes},
          {"time_us", r.time_us},       {"algbw_GBps", r.algbw_GBps}, {"busbw_GBps", r.busbw_GBps},
          {"repeats", r.repeats},       {"ok", r.ok}};
}

AllreduceRow row_from_json(const Json& j, const std::string& where) {
  const JsonReader in(j, where);
  in.reject_unknown(
      {"backend", "peers", "bytes", "time_us", "algbw_GBps", "busbw_GBps", "repeats", "ok"});
  AllreduceRow r;
  r.backend = in.string("backend");
  const long long peers = in.integer("peers");
  if (peers < 1 || peers > 1'000'000) in.fail_at("peers", "expected a positive count");
  r.peers = static_cast<int>(peers);
  r.bytes = in.integer("bytes");
  if (r.bytes < 0) in.fail_at("bytes", "expected a non-negative size");
  r.time_us = in.number("time_us");
  r.algbw_GBps = in.number("algbw_GBps");
  r.busbw_GBps = in.number("busbw_GBps");
  const long long repeats = in.integer("repeats");
  if (repeats < 0 || repeats > 1'000'000'000) in.fail_at("repeats", "expected a count");
  r.repeats = static_cast<int>(repeats);
  r.ok = in.boolean("ok");
  return r;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t m = values.size() / 2;
  return values.size() % 2 == 1 ? values[m] : 0.5 * (values[m - 1] + values[m]);
}

AllreduceRow make_row(std::string backend, int peers, long long bytes,
                      std::vector<double> times_us) {
  if (times_us.empty()) fail(Code::invalid_argument, "make_row: no times for " + backend);
  if (peers < 1) fail(Code::invalid_argument, "make_row: peers must be at least 1");
  if (bytes < 0) fail(Code::invalid_argument, "make_row: bytes must be non-negative");
  const double mid = median(times_us);
  AllreduceRow r;
  r.backend = std::move(backend);
  r.peers = peers;
  r.bytes = bytes;
  r.time_us = mid;
  r.algbw_GBps = mid > 0 ? static_cast<double>(bytes) / mid / 1e3 : 0.0;  // bytes/us -> GB/s
  r.busbw_GBps = r.algbw_GBps * 2.0 * (peers - 1) / peers;
  r.repeats = static_cast<int>(times_us.size());
  r.ok = true;
  return r;
}

int repeats_for_size(long long bytes, int repeats_hint) {
  constexpr long long kFullRepeatBytes = 4LL << 20;  // tools/bench/bench_common.h: repeats_for
  if (bytes <= 0) return repeats_hint;
  const long long scaled = static_cast<long long>(repeats_hint) * kFullRepeatBytes / bytes;
  return static_cast<int>(
      std::clamp<long long>(scaled, std::min(repeats_hint, 5), std::max(repeats_hint, 1)));
}

std::vector<AllreduceRow> run_baseline(const std::string& name, int peers,
                                       const std::vector<long long>& sizes_bytes, int warmup,
                                       int repeats_hint, bool pin, bool shared_memory) {
  check_args(name, peers, sizes_bytes, warmup, repeats_hint);
  const bool gloo = name == "gloo";
  const std::string program = gloo ? "dpgossip-bench-gloo" : "dpgossip-bench-mpi";
  std::vector<std::string> tried;
  const auto bench = find_beside_self(program, tried);
  if (!bench) {
    fail(Code::failed_precondition,
         "--baseline " + name + ": " + program + " not found (looked in " + join_tried(tried) +
             "); it is built only when " +
             (gloo ? std::string("Gloo is found: install Debian's libgloo-dev")
                   : std::string("MPI is found: install Debian's libopenmpi-dev and openmpi-bin")) +
             ", then rebuild (meson setup --reconfigure build && ninja -C build)");
  }

  std::vector<std::string> argv;
  if (gloo) {
    argv = {bench->string(), "--peers", std::to_string(peers), "--pin", pin ? "1" : "0"};
  } else {
    const auto mpirun = find_on_path("mpirun");
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
  std::string sizes;
  for (long long b : sizes_bytes) {
    if (!sizes.empty()) sizes += ',';
    sizes += std::to_string(b);
  }
  argv.insert(argv.end(), {"--sizes", sizes, "--warmup", std::to_string(warmup), "--repeats",
                           std::to_string(repeats_hint)});

  const std::string out = run_captured(argv, kBaselineTimeout);
  const std::string backend = gloo ? "gloo" : "openmpi";
  std::vector<AllreduceRow> rows;
  std::istringstream lines(out);
  int line_no = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = program + " output line " + std::to_string(line_no);
    Json j;
    try {
      j = Json::parse(line);
    } catch (const Json::parse_error& e) {
      fail(Code::internal, where + ": not a JSON row (" + e.what() + "): " + line);
    }
    AllreduceRow r = row_from_json(j, where);
    const std::size_t i = rows.size();
    if (i >= sizes_bytes.size() || r.backend != backend || r.peers != peers ||
        r.bytes != sizes_bytes[i]) {
      fail(Code::internal, where + ": unexpected row " + line + " (expected backend " + backend +
                               ", " + std::to_string(peers) + " peers, " +
                               (i < sizes_bytes.size() ? std::to_string(sizes_bytes[i]) + " bytes"
                                                       : std::string("no more rows")) + ")");
    }
    if (!r.ok) {
      fail(Code::failed_precondition, where + ": the " + backend + " all-reduce gave a wrong sum");
    }
    rows.push_back(std::move(r));
  }
  if (rows.size() != sizes_bytes.size()) {
    fail(Code::internal, program + " printed " + std::to_string(rows.size()) + " rows for " +
                             std::to_string(sizes_bytes.size()) + " sizes: " + join(argv));
  }
  return rows;
}

}  // namespace dpg::app
