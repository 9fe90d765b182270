// `dpgossip launch`: start the peers of this machine as child processes, prefix their output with
// their rank, and stop them all when one fails or when the launcher is interrupted.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/net/hosts.h"

namespace dpg::app {

struct Child {
  std::string label;              // the rank: its output lines read "[label] ...", messages "rank label"
  std::vector<std::string> argv;  // argv[0]: a path, or a program name looked up in PATH
  std::vector<std::pair<std::string, std::string>> env;  // set over the launcher's environment
};

struct SuperviseOptions {
  // After SIGTERM (or a forwarded SIGINT), how long the children get to exit before SIGKILL: a
  // trainer stops at its next step boundary and writes its checkpoint within it.
  std::chrono::milliseconds grace{5000};
  // After the last child exits, how long to wait for end-of-file on pipes that its own children
  // (grandchildren of the launcher) still hold open; their later output is dropped.
  std::chrono::milliseconds drain{1000};
  // After SIGKILL, how long to wait for the exit before giving up on a child (it stays a zombie).
  std::chrono::milliseconds kill_wait{10000};
  int out_fd = 1;  // where the children's stdout lines go, prefixed
  int err_fd = 2;  // where their stderr lines and the launcher's own messages go
  // Catch SIGINT, SIGTERM and SIGHUP while supervising, and SIGPIPE is ignored (a launcher whose
  // reader went away keeps supervising). Only one supervise() with this set may run at a time in
  // a process.
  bool handle_signals = true;
  // Called in the launcher after each child starts (tests use it to check the pid is gone later).
  std::function<void(size_t index, pid_t pid)> on_start;
};

// Starts every child (proc::Process: stdin from /dev/null, stdout and stderr piped, a process
// group of its own, SIGTERM when the launcher dies) and copies each complete output line to
// out_fd / err_fd as "[label] line"; a last line without a newline is flushed at end of file.
// When a child exits non-zero or by a signal, reports which and how, sends SIGTERM to the others
// and SIGKILL to those still running `grace` later.
// Signals to the launcher: the first SIGINT or SIGTERM is passed on to every child as it is
// (SIGHUP as SIGTERM), so that each stops gracefully; SIGKILL follows `grace` later. A second one
// of the three sends SIGKILL to every child at once. The children's own process groups keep a
// terminal's Ctrl-C from reaching them directly, so each sees a signal exactly once.
// Returns 0 when every child exited 0; 128 + signal when the launcher was signalled; otherwise the
// first failing child's exit code, or 128 + signal when a signal ended it. Only the started pids
// are ever signalled. Throws (invalid_argument, not_found, unavailable) when a child cannot be
// started; children already started are stopped first.
int supervise(const std::vector<Child>& children, const SuperviseOptions& options = {});

// The children `dpgossip launch` starts: one per peer of `hosts` whose host is this machine, as
// `exe args... --hosts hosts_path --rank r` (no --hosts when `args` already has one). Throws
// invalid_argument when `args` is empty or has --rank, or when no peer is local (naming the file).
// A folder made with mkdtemp under $TMPDIR (else /tmp), named PREFIX-XXXXXX, removed with its
// contents when this goes out of scope. Throws failed_precondition "<who>: cannot create a
// temporary folder ..." when it cannot be made.
class TempDir {
 public:
  TempDir(const std::string& prefix, const std::string& who);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

std::vector<Child> local_children(const net::HostsFile& hosts, const std::string& hosts_path,
                                  const std::string& exe, const std::vector<std::string>& args);

}  // namespace dpg::app
