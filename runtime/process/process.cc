#include "runtime/process/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "runtime/process/find.h"
#include "runtime/core/error.h"

extern char** environ;

namespace dpg::proc {
namespace {

using std::chrono::milliseconds;

std::string errno_text(int e) { return std::strerror(e); }

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Closes what it holds when it goes out of scope (the pipes of a spawn that failed half way).
struct Fds {
  int fd[8];
  int n = 0;
  Fds() { std::fill(std::begin(fd), std::end(fd), -1); }
  ~Fds() {
    for (int i = 0; i < n; ++i) close_fd(fd[i]);
  }
  int& add(int value) { return fd[n++] = value; }
};

// Everything the child needs, built before fork: only async-signal-safe calls run after it.
struct Prepared {
  std::string path;
  std::vector<std::string> argv_text, env_text;
  std::vector<char*> argv, envp;
};

Prepared prepare(const Command& c, const std::string& what) {
  if (c.argv.empty()) fail(Code::invalid_argument, what + ": empty command");
  Prepared p;
  p.path = require_program(c.argv.front(), what).string();
  p.argv_text = c.argv;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    bool replaced = false;
    for (const auto& kv : c.env) replaced = replaced || entry.rfind(kv.first + "=", 0) == 0;
    if (!replaced) p.env_text.push_back(entry);
  }
  for (const auto& [key, value] : c.env) {
    if (key.empty() || key.find('=') != std::string::npos)
      fail(Code::invalid_argument, what + ": bad environment variable name \"" + key + "\"");
    p.env_text.push_back(key + "=" + value);
  }
  for (auto& s : p.argv_text) p.argv.push_back(s.data());
  p.argv.push_back(nullptr);
  for (auto& s : p.env_text) p.envp.push_back(s.data());
  p.envp.push_back(nullptr);
  return p;
}

// The child's end of one stream: an fd to dup2 onto 0, 1 or 2, or -1 to leave it as it is.
int child_end(const Stdio& s, int target, Fds& fds, int& parent_end, const std::string& what) {
  switch (s.kind) {
    case Stdio::Kind::inherit:
      return -1;
    case Stdio::Kind::null: {
      const int fd = ::open("/dev/null", (target == 0 ? O_RDONLY : O_WRONLY) | O_CLOEXEC);
      if (fd < 0) fail(Code::unavailable, what + ": cannot open /dev/null: " + errno_text(errno));
      return fds.add(fd);
    }
    case Stdio::Kind::file: {
      const int fd = ::open(s.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0)
        fail(Code::failed_precondition,
             what + ": cannot open " + s.path + " for its output: " + errno_text(errno));
      return fds.add(fd);
    }
    case Stdio::Kind::pipe:
    case Stdio::Kind::capture:
    case Stdio::Kind::prefixed: {
      if (target == 0) fail(Code::invalid_argument, what + ": stdin can only be inherited or null");
      int p[2];
      if (::pipe2(p, O_CLOEXEC) != 0)
        fail(Code::unavailable, what + ": pipe: " + errno_text(errno));
      parent_end = p[0];
      ::fcntl(p[0], F_SETFL, O_NONBLOCK);
      fds.add(p[0]);
      return fds.add(p[1]);
    }
  }
  return -1;
}

// In the child, between fork and exec: async-signal-safe calls only. On failure the errno is
// written to `report` (close-on-exec, so the parent reads end of file when execve succeeds).
[[noreturn]] void exec_child(const Prepared& p, const SpawnOptions& o, const int ends[3],
                             int report, pid_t parent) {
  int err = 0;
  if (o.die_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
  }
  if (o.own_process_group && ::setpgid(0, 0) != 0) err = errno;
  for (int i = 0; i < 3 && err == 0; ++i) {
    // dup2 onto itself keeps close-on-exec, so that case clears the flag instead.
    if (ends[i] == i && ::fcntl(i, F_SETFD, 0) != 0) err = errno;
    if (ends[i] >= 0 && ends[i] != i && ::dup2(ends[i], i) < 0) err = errno;
  }
  if (err == 0) {
    // The parent's handlers would run here (they write to its pipes), and a caller run in the
    // background by a shell has SIGINT ignored, which a forwarded Ctrl-C must still reach.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int s = 1; s < NSIG; ++s) {
      struct sigaction cur {};
      if (::sigaction(s, nullptr, &cur) != 0) continue;
      const bool caught = cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN;
      if (caught || s == SIGINT || s == SIGTERM || s == SIGHUP || s == SIGPIPE)
        ::sigaction(s, &dfl, nullptr);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(p.path.c_str(), p.argv.data(), p.envp.data());
    err = errno;
  }
  (void)!::write(report, &err, sizeof err);
  ::_exit(127);
}

}  // namespace

Process Process::spawn(const Command& command, const SpawnOptions& o) {
  const std::string what =
      !o.what.empty() ? o.what : command.argv.empty() ? std::string("command") : command.argv[0];
  if (o.stop_grace.count() < 0) fail(Code::invalid_argument, what + ": stop_grace must be >= 0");
  const Prepared p = prepare(command, what);
  Fds fds;
  int parent_out = -1, parent_err = -1, unused = -1;
  const int ends[3] = {child_end(o.in, 0, fds, unused, what),
                       child_end(o.out, 1, fds, parent_out, what),
                       child_end(o.err, 2, fds, parent_err, what)};
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0)
    fail(Code::unavailable, what + ": pipe: " + errno_text(errno));
  fds.add(report[0]);
  int& report_write = fds.add(report[1]);  // closed through `fds`, so that it is closed once

  // Every signal blocked across fork: no handler of this process may run in the child before
  // it has put the defaults back.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) exec_child(p, o, ends, report[1], parent);
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) fail(Code::unavailable, what + ": fork: " + errno_text(fork_errno));

  Process child;
  child.pid_ = pid;
  child.what_ = what;
  child.stop_grace_ = o.stop_grace;
  // Also here, so that the group exists before anyone signals it (the child may not have run).
  if (o.own_process_group) ::setpgid(pid, pid);
  close_fd(report_write);
  int exec_errno = 0;
  ssize_t n;
  while ((n = ::read(report[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  if (n > 0) {
    child.wait_until(Clock::now() + std::chrono::seconds(10));  // it exits at once: _exit(127)
    fail(exec_errno == ENOENT ? Code::not_found : Code::failed_precondition,
         what + ": cannot execute " + p.path + ": " + errno_text(exec_errno));
  }
  // The pipes' read ends pass to the Process; everything else closes with `fds`.
  for (int i = 0; i < fds.n; ++i) {
    if (fds.fd[i] == parent_out || fds.fd[i] == parent_err) fds.fd[i] = -1;
  }
  child.out_fd_ = parent_out;
  child.err_fd_ = parent_err;
  return child;
}

Process::Process(Process&& other) noexcept { *this = std::move(other); }

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    if (running()) terminate(stop_grace_);
    close_fds();
    pid_ = std::exchange(other.pid_, -1);
    status_ = std::exchange(other.status_, std::nullopt);
    out_fd_ = std::exchange(other.out_fd_, -1);
    err_fd_ = std::exchange(other.err_fd_, -1);
    stop_grace_ = other.stop_grace_;
    what_ = std::move(other.what_);
  }
  return *this;
}

Process::~Process() {
  if (running()) terminate(stop_grace_);
  close_fds();
}

void Process::close_fds() {
  close_fd(out_fd_);
  close_fd(err_fd_);
}

std::optional<int> Process::poll() {
  if (pid_ <= 0 || status_) return status_;
  int st = 0;
  pid_t got;
  while ((got = ::waitpid(pid_, &st, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (got == pid_) status_ = st;
  else if (got < 0 && errno == ECHILD) status_ = kStatusLost;
  return status_;
}

std::optional<int> Process::wait_until(Clock::time_point deadline) {
  // Polled: a child's exit is not a file descriptor without pidfds, and 1-20 ms is far below
  // any deadline given here.
  milliseconds nap{1};
  while (!poll()) {
    const auto now = Clock::now();
    if (now >= deadline) return std::nullopt;
    std::this_thread::sleep_for(
        std::min<Clock::duration>(nap, deadline - now));
    nap = std::min(nap * 2, milliseconds(20));
  }
  return status_;
}

bool Process::signal(int signo) {
  if (!running() || poll()) return false;  // reaped: the pid may belong to someone else now
  return ::kill(pid_, signo) == 0;
}

std::optional<int> Process::terminate(milliseconds grace, milliseconds kill_wait) {
  if (!running()) return status_;
  signal(SIGTERM);
  if (wait_until(Clock::now() + grace)) return status_;
  signal(SIGKILL);
  return wait_until(Clock::now() + kill_wait);
}

std::string signal_name(int signo) {
  const char* abbrev = ::sigabbrev_np(signo);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(signo);
}

std::string describe_status(int status) {
  if (status == kStatusLost) return "exit status lost (reaped elsewhere; is SIGCHLD ignored?)";
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "killed by " + signal_name(WTERMSIG(status)) +
           (WCOREDUMP(status) ? " (core dumped)" : "");
  return "wait status " + std::to_string(status);
}

bool succeeded(int status) {
  return status != kStatusLost && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int exit_code(int status) {
  if (status == kStatusLost) return 1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string duration_text(milliseconds d) {
  const long long t = d.count();
  return t % 1000 == 0 ? std::to_string(t / 1000) + " s" : std::to_string(t) + " ms";
}

}  // namespace dpg::proc
