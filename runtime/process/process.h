// Child processes, the one way dpgossip's commands start them: `dpgossip launch` and the peers of
// `bench allreduce` (apps/launch.cc), the Gloo, OpenMPI and PyTorch baselines of the benchmarks
// (apps/bench/). A child is an argument vector and environment changes, never a shell command
// line; it is started with fork and execve so that it can be tied to its parent's life
// (PR_SET_PDEATHSIG), and every wait on it has a deadline.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dpg::proc {

using Clock = std::chrono::steady_clock;

struct Command {
  // argv[0]: a path (anything with a '/'), or a program name looked up in PATH (find_program).
  std::vector<std::string> argv;
  // Set (or replaced) over this process's environment; everything else is inherited.
  std::vector<std::pair<std::string, std::string>> env;
};

// Where one standard stream of a child goes. spawn() knows inherit, null, file and pipe; run()
// (run.h) also takes capture and prefixed, which it reads through a pipe.
struct Stdio {
  enum class Kind { inherit, null, file, pipe, capture, prefixed };
  Kind kind = Kind::inherit;
  std::string path;    // file: created or truncated (mode 0644)
  std::string prefix;  // prefixed: put before each line, e.g. "[3] "

  static Stdio inherit() { return {}; }
  static Stdio null() { return {Kind::null, {}, {}}; }
  static Stdio file(std::string path) { return {Kind::file, std::move(path), {}}; }
  static Stdio pipe() { return {Kind::pipe, {}, {}}; }
  // Kept in memory, up to RunOptions::capture_limit_bytes.
  static Stdio capture() { return {Kind::capture, {}, {}}; }
  // Copied line by line to this process's own stream of the same kind, behind `prefix`.
  static Stdio prefixed(std::string prefix) { return {Kind::prefixed, {}, std::move(prefix)}; }
};

struct SpawnOptions {
  Stdio in = Stdio::null();  // children never read the terminal: they may be many, and run late
  Stdio out = Stdio::inherit();
  Stdio err = Stdio::inherit();
  // A process group of its own, so that a terminal's Ctrl-C (sent to the foreground group)
  // reaches only this process, which then decides what the child gets; `dpgossip launch`
  // forwards it exactly once instead of each peer seeing it twice.
  bool own_process_group = false;
  // The child gets SIGTERM when the thread that started it ends (PR_SET_PDEATHSIG), so no child
  // outlives a launcher that crashed or was killed.
  bool die_with_parent = true;
  // Between SIGTERM and SIGKILL when the Process is destroyed still running (an error path).
  std::chrono::milliseconds stop_grace{5000};
  // Names the child in messages ("rank 3", "dpgossip-bench-gloo"); argv[0] when empty.
  std::string what;
};

// A started child. Move-only; destroying one that still runs stops it (terminate with
// stop_grace) and reaps it, so no error path leaves a child behind. Only this pid is ever
// signalled, and never after it was reaped (its number may have been reused).
class Process {
 public:
  // Starts the command; returns once execve has succeeded in the child. Throws dpg::Error:
  // invalid_argument (empty argv), not_found (no such program), failed_precondition (cannot be
  // executed, or a file for its output cannot be opened), unavailable (pipe or fork failed).
  static Process spawn(const Command& command, const SpawnOptions& options = {});

  Process() = default;
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();

  pid_t pid() const { return pid_; }
  const std::string& what() const { return what_; }
  // Read ends of the Stdio::pipe streams (non-blocking, close-on-exec), else -1. The Process
  // closes them when destroyed; take_out_fd / take_err_fd hand one over to the caller.
  int out_fd() const { return out_fd_; }
  int err_fd() const { return err_fd_; }
  int take_out_fd() { return std::exchange(out_fd_, -1); }
  int take_err_fd() { return std::exchange(err_fd_, -1); }

  bool running() const { return pid_ > 0 && !status_; }
  // The wait status once reaped (kStatusLost when someone else reaped it).
  std::optional<int> status() const { return status_; }

  // Reaps without blocking: the wait status once the child has exited, else nullopt.
  std::optional<int> poll();
  // Waits until the child exits or `deadline` passes (then nullopt; the child keeps running).
  std::optional<int> wait_until(Clock::time_point deadline);
  // Sends `signo` while the child runs; false once it has been reaped.
  bool signal(int signo);
  // SIGTERM, up to `grace` for the exit, then SIGKILL and up to `kill_wait` more. Returns the
  // wait status, or nullopt when even SIGKILL did not end it in time (stuck in the kernel).
  std::optional<int> terminate(std::chrono::milliseconds grace,
                               std::chrono::milliseconds kill_wait = std::chrono::seconds(10));

 private:
  void close_fds();

  pid_t pid_ = -1;
  std::optional<int> status_;
  int out_fd_ = -1, err_fd_ = -1;
  std::chrono::milliseconds stop_grace_{5000};
  std::string what_;
};

// The wait status of a child that was reaped by someone else (SIGCHLD ignored by the embedding
// program): its outcome is unknown, and is counted as a failure.
inline constexpr int kStatusLost = -1;

// "exited with code 3", "killed by SIGKILL", "killed by SIGSEGV (core dumped)", from a wait
// status; the one description of a child's end in dpgossip's messages.
std::string describe_status(int status);

// True for a child that exited with code 0.
bool succeeded(int status);

// The code a command reports for a child's end: its exit code, 128 + signal when a signal ended
// it (as shells do), 1 when the status was lost.
int exit_code(int status);

// "SIGTERM", or "signal 77" for a number without a name.
std::string signal_name(int signo);

// "2 s", "300 ms": a duration as messages print it.
std::string duration_text(std::chrono::milliseconds d);

}  // namespace dpg::proc
