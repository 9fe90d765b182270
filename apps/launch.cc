#include "apps/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <iterator>
#include <optional>

#include "runtime/core/error.h"

extern char** environ;

namespace dpg::app {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kReadBytes = 64 * 1024;
constexpr size_t kMaxLineBytes = 64 * 1024;  // a longer line without a newline is split here
constexpr milliseconds kPollPeriod{50};      // also how often exits are checked (waitpid WNOHANG)
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
// A child reaped by someone else (SIGCHLD ignored by the embedding program): counted a failure.
constexpr int kStatusLost = -1;

// The write end of the self-pipe while a supervise() handles signals, -1 otherwise. A global
// because a signal handler can reach nothing else; lock-free, so safe to read in the handler.
std::atomic<int> g_wake_fd{-1};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_signal(int signo) {
  const int saved = errno;
  const int fd = g_wake_fd.load();
  const unsigned char byte = static_cast<unsigned char>(signo);
  if (fd >= 0) (void)!::write(fd, &byte, 1);
  errno = saved;
}

std::string errno_text() { return std::strerror(errno); }

std::string signal_name(int signo) {
  const char* abbrev = ::sigabbrev_np(signo);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(signo);
}

std::string seconds(milliseconds ms) {
  const long long t = ms.count();
  return t % 1000 == 0 ? std::to_string(t / 1000) + " s" : std::to_string(t) + " ms";
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Writes everything, waiting up to a second at a time for a full non-blocking sink; returns false
// (and the sink is given up) when the reader went away or stays stuck.
bool write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  int stuck = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      stuck = 0;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN && ++stuck <= 10) {
      pollfd p{fd, POLLOUT, 0};
      (void)::poll(&p, 1, 1000);
    } else {
      return false;
    }
  }
  return true;
}

struct Sink {
  int fd;
  bool broken = false;
  void put(const std::string& bytes) {
    if (!broken && !bytes.empty()) broken = !write_all(fd, bytes);
  }
};

// One output pipe of a child and the start of a line not yet ended by a newline.
struct Stream {
  int fd = -1;
  std::string pending;
};

struct Running {
  std::string label;
  pid_t pid = -1;
  Stream out, err;
  bool reaped = false;
  int status = 0;
};

// Blocks SIGINT, SIGTERM and SIGHUP for its lifetime so that a fork sees no handler run between
// the fork and the child's reset of the dispositions.
class BlockSignals {
 public:
  BlockSignals() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : kSignals) sigaddset(&set, s);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~BlockSignals() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  BlockSignals(const BlockSignals&) = delete;
  BlockSignals& operator=(const BlockSignals&) = delete;

 private:
  sigset_t old_;
};

// Everything a child needs, built before fork: only async-signal-safe calls run after it.
struct Prepared {
  std::string path;
  std::vector<std::string> argv_text, env_text;
  std::vector<char*> argv, envp;
  std::string exec_failed;  // the message written when execve fails
};

std::string find_program(const Child& c) {
  const std::string& name = c.argv.front();
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) != 0)
      fail(Code::not_found, "launch: rank " + c.label + ": cannot execute " + name + ": " +
                                errno_text());
    return name;
  }
  const char* env_path = std::getenv("PATH");
  const std::string path = env_path && *env_path ? env_path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find(':', start), path.size());
    const std::string dir = end == start ? "." : path.substr(start, end - start);
    const std::string candidate = dir + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    start = end + 1;
  }
  fail(Code::not_found, "launch: rank " + c.label + ": program " + name + " not found in PATH");
}

Prepared prepare(const Child& c) {
  if (c.argv.empty()) fail(Code::invalid_argument, "launch: rank " + c.label + ": empty command");
  Prepared p;
  p.path = find_program(c);
  p.argv_text = c.argv;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    bool overridden = false;
    for (const auto& [key, value] : c.env) overridden = overridden || entry.rfind(key + "=", 0) == 0;
    if (!overridden) p.env_text.push_back(entry);
  }
  for (const auto& [key, value] : c.env) p.env_text.push_back(key + "=" + value);
  for (auto& s : p.argv_text) p.argv.push_back(s.data());
  p.argv.push_back(nullptr);
  for (auto& s : p.env_text) p.envp.push_back(s.data());
  p.envp.push_back(nullptr);
  p.exec_failed = "dpgossip launch: cannot execute " + p.path + "\n";
  return p;
}

// In the child, between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(const Prepared& p, int null_fd, int out_w, int err_w, pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl took effect
  if (::dup2(null_fd, 0) < 0 || ::dup2(out_w, 1) < 0 || ::dup2(err_w, 2) < 0) ::_exit(127);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int s : kSignals) ::sigaction(s, &dfl, nullptr);
  ::sigaction(SIGPIPE, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(p.path.c_str(), p.argv.data(), p.envp.data());
  (void)!::write(2, p.exec_failed.data(), p.exec_failed.size());
  ::_exit(127);
}

class Supervisor {
 public:
  // Checks every command before anything starts; acquires nothing, so it may throw freely.
  Supervisor(const std::vector<Child>& children, const SuperviseOptions& o)
      : o_(o), out_{o.out_fd}, err_{o.err_fd} {
    for (const Child& c : children) prepared_.push_back(prepare(c));
    for (const Child& c : children) {
      Running r;
      r.label = c.label;
      running_.push_back(std::move(r));
    }
  }
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  void start_all();
  int run();

 private:
  void open_resources();
  void restore_handlers();
  void start(size_t i);
  void say(const std::string& line) { err_.put("dpgossip launch: " + line + "\n"); }
  void read_some(Running& r, Stream& s, bool to_err, int max_reads);
  void emit(const Running& r, Stream& s, bool to_err, bool at_eof);
  void on_signal_bytes();
  void reap();
  void on_exit(Running& r);
  void stop();
  size_t unreaped() const;
  bool streams_open() const;
  void signal_unreaped(int signo);

  const SuperviseOptions& o_;
  Sink out_, err_;
  std::vector<Prepared> prepared_;
  std::vector<Running> running_;
  int null_fd_ = -1;
  int wake_[2] = {-1, -1};
  struct sigaction old_actions_[std::size(kSignals)] = {};
  struct sigaction old_pipe_ {};
  bool owns_wake_fd_ = false, handlers_installed_ = false, pipe_ignored_ = false;

  int result_ = 0;
  int got_signal_ = 0;
  bool stopping_ = false, killed_ = false;
  Clock::time_point term_deadline_, kill_deadline_;
  std::optional<Clock::time_point> drain_deadline_;
};

// Each step records what it took, so that the destructor gives back exactly that on any throw.
void Supervisor::open_resources() {
  null_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd_ < 0) fail(Code::unavailable, "launch: cannot open /dev/null: " + errno_text());
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    wake_[0] = wake_[1] = -1;
    fail(Code::unavailable, "launch: pipe: " + errno_text());
  }
  // SIGPIPE ignored: a launcher whose stdout reader went away keeps supervising (writes fail).
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &old_pipe_);
  pipe_ignored_ = true;
  if (!o_.handle_signals) return;
  int expected = -1;
  if (!g_wake_fd.compare_exchange_strong(expected, wake_[1]))
    fail(Code::failed_precondition, "launch: another supervise() already handles signals");
  owns_wake_fd_ = true;
  struct sigaction act {};
  act.sa_handler = on_signal;
  sigemptyset(&act.sa_mask);
  act.sa_flags = SA_RESTART;
  for (size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &act, &old_actions_[i]);
  handlers_installed_ = true;
}

void Supervisor::restore_handlers() {
  if (handlers_installed_) {
    for (size_t i = 0; i < std::size(kSignals); ++i)
      ::sigaction(kSignals[i], &old_actions_[i], nullptr);
    handlers_installed_ = false;
  }
  if (owns_wake_fd_) {
    g_wake_fd.store(-1);
    owns_wake_fd_ = false;
  }
  if (pipe_ignored_) {
    ::sigaction(SIGPIPE, &old_pipe_, nullptr);
    pipe_ignored_ = false;
  }
}

// A safety net for exceptions: whatever is still running is killed and reaped (bounded).
Supervisor::~Supervisor() {
  signal_unreaped(SIGKILL);
  const auto deadline = Clock::now() + o_.kill_wait;
  while (unreaped() > 0 && Clock::now() < deadline) {
    reap();
    if (unreaped() > 0) ::usleep(10000);
  }
  for (Running& r : running_) {
    close_fd(r.out.fd);
    close_fd(r.err.fd);
  }
  restore_handlers();
  close_fd(wake_[0]);
  close_fd(wake_[1]);
  close_fd(null_fd_);
}

void Supervisor::start(size_t i) {
  Running& r = running_[i];
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0)
    fail(Code::unavailable, "launch: rank " + r.label + ": pipe: " + errno_text());
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    const std::string e = errno_text();
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    fail(Code::unavailable, "launch: rank " + r.label + ": pipe: " + e);
  }
  r.out.fd = out_pipe[0];
  r.err.fd = err_pipe[0];
  const pid_t parent = ::getpid();
  pid_t pid;
  {
    BlockSignals block;
    pid = ::fork();
    if (pid == 0) exec_child(prepared_[i], null_fd_, out_pipe[1], err_pipe[1], parent);
  }
  const int fork_errno = errno;
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (pid < 0)
    fail(Code::unavailable, "launch: rank " + r.label + ": fork: " + std::strerror(fork_errno));
  r.pid = pid;
  ::fcntl(r.out.fd, F_SETFL, O_NONBLOCK);
  ::fcntl(r.err.fd, F_SETFL, O_NONBLOCK);
  if (o_.on_start) o_.on_start(i, pid);
}

void Supervisor::start_all() {
  open_resources();
  for (size_t i = 0; i < running_.size(); ++i) {
    // A SIGINT or SIGTERM during start-up starts no one more; run() then stops those started.
    pollfd pending{wake_[0], POLLIN, 0};
    if (::poll(&pending, 1, 0) > 0) {
      on_signal_bytes();
      return;
    }
    start(i);
  }
}

size_t Supervisor::unreaped() const {
  size_t n = 0;
  for (const Running& r : running_) n += (r.pid > 0 && !r.reaped) ? 1 : 0;
  return n;
}

bool Supervisor::streams_open() const {
  for (const Running& r : running_) {
    if (r.out.fd >= 0 || r.err.fd >= 0) return true;
  }
  return false;
}

void Supervisor::signal_unreaped(int signo) {
  for (const Running& r : running_) {
    if (r.pid > 0 && !r.reaped) ::kill(r.pid, signo);
  }
}

// Copies every complete line in `s.pending` to the sink, prefixed; at end of file also the rest.
void Supervisor::emit(const Running& r, Stream& s, bool to_err, bool at_eof) {
  std::string text;
  const std::string prefix = "[" + r.label + "] ";
  size_t begin = 0;
  while (begin < s.pending.size()) {
    const size_t nl = s.pending.find('\n', begin);
    const size_t end = std::min({nl, s.pending.size(), begin + kMaxLineBytes});
    if (end != nl && end - begin < kMaxLineBytes && !at_eof) break;  // wait for the rest
    text += prefix;
    text.append(s.pending, begin, end - begin);
    text += '\n';
    begin = end == nl ? end + 1 : end;
  }
  s.pending.erase(0, std::min(begin, s.pending.size()));
  (to_err ? err_ : out_).put(text);
}

// Reads what is there (at most `max_reads` reads); closes the stream at end of file or error.
void Supervisor::read_some(Running& r, Stream& s, bool to_err, int max_reads) {
  char buf[kReadBytes];
  for (int i = 0; i < max_reads && s.fd >= 0; ++i) {
    const ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n > 0) {
      s.pending.append(buf, static_cast<size_t>(n));
      emit(r, s, to_err, false);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    emit(r, s, to_err, true);  // end of file, or an error: what remains is the last line
    close_fd(s.fd);
  }
}

std::string other_ranks(size_t n) {
  return n == 1 ? "the other rank" : "the other " + std::to_string(n) + " ranks";
}

void Supervisor::stop() {
  if (stopping_) return;
  stopping_ = true;
  term_deadline_ = Clock::now() + o_.grace;
  signal_unreaped(SIGTERM);
}

void Supervisor::on_exit(Running& r) {
  // Output written before the exit goes out before the message about it.
  read_some(r, r.out, false, 64);
  read_some(r, r.err, true, 64);
  const bool failed = !(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0);
  if (stopping_) {
    say("rank " + r.label + " stopped: " + describe_status(r.status));
    return;
  }
  if (!failed) return;
  result_ = r.status == kStatusLost ? 1
            : WIFEXITED(r.status)    ? WEXITSTATUS(r.status)
                                     : 128 + WTERMSIG(r.status);
  const size_t others = unreaped();
  say("rank " + r.label + " failed: " + describe_status(r.status) +
      (others > 0 ? "; stopping " + other_ranks(others) + " (SIGTERM, SIGKILL after " +
                        seconds(o_.grace) + ")"
                  : ""));
  stop();
}

void Supervisor::reap() {
  for (Running& r : running_) {
    if (r.pid <= 0 || r.reaped) continue;
    int status = 0;
    const pid_t got = ::waitpid(r.pid, &status, WNOHANG);
    if (got == r.pid || (got < 0 && errno == ECHILD)) {
      r.reaped = true;
      r.status = got == r.pid ? status : kStatusLost;
      on_exit(r);
    }
  }
}

void Supervisor::on_signal_bytes() {
  unsigned char bytes[64];
  ssize_t n;
  while ((n = ::read(wake_[0], bytes, sizeof bytes)) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      const int signo = bytes[i];
      if (got_signal_ != 0 && !killed_ && unreaped() > 0) {
        say("got " + signal_name(signo) + " again; sending SIGKILL");
        signal_unreaped(SIGKILL);
        killed_ = true;
        kill_deadline_ = Clock::now() + o_.kill_wait;
        continue;
      }
      if (got_signal_ != 0) continue;
      got_signal_ = signo;
      const size_t left = unreaped();
      if (stopping_ || left == 0) {
        say("got " + signal_name(signo));
      } else {
        say("got " + signal_name(signo) + "; stopping " + std::to_string(left) +
            (left == 1 ? " rank" : " ranks") + " (SIGTERM, SIGKILL after " + seconds(o_.grace) +
            ")");
      }
      stop();
    }
  }
}

int Supervisor::run() {
  std::vector<pollfd> fds;
  std::vector<std::pair<Running*, bool>> owners;  // per pollfd after the first: child, is stderr
  while (true) {
    // Signals first: after a Ctrl-C the children (same process group) die of SIGINT too, and
    // that is the launcher being interrupted, not a rank failing.
    on_signal_bytes();
    reap();
    const auto now = Clock::now();
    if (unreaped() == 0) {
      if (!drain_deadline_) drain_deadline_ = now + o_.drain;
      if (!streams_open() || now >= *drain_deadline_) break;
    }
    if (stopping_ && !killed_ && now >= term_deadline_ && unreaped() > 0) {
      for (const Running& r : running_) {
        if (r.pid > 0 && !r.reaped)
          say("rank " + r.label + " did not stop within " + seconds(o_.grace) +
              " of SIGTERM; sending SIGKILL");
      }
      signal_unreaped(SIGKILL);
      killed_ = true;
      kill_deadline_ = now + o_.kill_wait;
    }
    if (killed_ && now >= kill_deadline_ && unreaped() > 0) {
      for (const Running& r : running_) {
        if (r.pid > 0 && !r.reaped)
          say("rank " + r.label + " (pid " + std::to_string(r.pid) + ") did not exit " +
              seconds(o_.kill_wait) + " after SIGKILL; giving up on it");
      }
      if (result_ == 0) result_ = 1;
      break;
    }
    fds.assign(1, pollfd{wake_[0], POLLIN, 0});
    owners.assign(1, {nullptr, false});
    for (Running& r : running_) {
      if (r.out.fd >= 0) fds.push_back({r.out.fd, POLLIN, 0}), owners.push_back({&r, false});
      if (r.err.fd >= 0) fds.push_back({r.err.fd, POLLIN, 0}), owners.push_back({&r, true});
    }
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(kPollPeriod.count()));
    if (ready < 0 && errno != EINTR) fail(Code::internal, "launch: poll: " + errno_text());
    if (ready <= 0) continue;
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Running& r = *owners[i].first;
      read_some(r, owners[i].second ? r.err : r.out, owners[i].second, 1);
    }
  }
  for (Running& r : running_) {  // pipes still held by grandchildren after the drain time
    read_some(r, r.out, false, 1);
    read_some(r, r.err, true, 1);
    emit(r, r.out, false, true);
    emit(r, r.err, true, true);
    close_fd(r.out.fd);
    close_fd(r.err.fd);
  }
  return got_signal_ != 0 ? 128 + got_signal_ : result_;
}

}  // namespace

std::string describe_status(int status) {
  if (status == kStatusLost) return "exit status lost (reaped elsewhere; is SIGCHLD ignored?)";
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "killed by " + signal_name(WTERMSIG(status)) +
           (WCOREDUMP(status) ? " (core dumped)" : "");
  return "status " + std::to_string(status);
}

int supervise(const std::vector<Child>& children, const SuperviseOptions& options) {
  if (children.empty()) fail(Code::invalid_argument, "launch: no process to start");
  if (options.grace.count() < 0 || options.drain.count() < 0 || options.kill_wait.count() < 0)
    fail(Code::invalid_argument, "launch: grace, drain and kill_wait must be >= 0");
  Supervisor s(children, options);
  s.start_all();
  return s.run();
}

std::vector<Child> local_children(const net::HostsFile& hosts, const std::string& hosts_path,
                                  const std::string& exe, const std::vector<std::string>& args) {
  if (args.empty())
    fail(Code::invalid_argument,
         "launch: no command after --; e.g. dpgossip launch --peers 4 -- train --epochs 1");
  bool has_hosts = false;
  for (const std::string& a : args) {
    if (a == "--rank" || a.rfind("--rank=", 0) == 0)
      fail(Code::invalid_argument,
           "launch: the command has --rank; the launcher gives each peer its own --rank");
    has_hosts = has_hosts || a == "--hosts" || a.rfind("--hosts=", 0) == 0;
  }
  std::vector<Child> children;
  std::string remote;
  for (const net::PeerAddress& p : hosts.peers) {
    if (!net::is_local_host(p.host)) {
      remote += (remote.empty() ? "" : ", ") + p.host;
      continue;
    }
    Child c;
    c.label = std::to_string(p.rank);
    c.argv.push_back(exe);
    c.argv.insert(c.argv.end(), args.begin(), args.end());
    if (!has_hosts) c.argv.insert(c.argv.end(), {"--hosts", hosts_path});
    c.argv.insert(c.argv.end(), {"--rank", c.label});
    children.push_back(std::move(c));
  }
  if (children.empty())
    fail(Code::invalid_argument,
         hosts_path + ": no peer is on this machine (hosts " + remote +
             "); run dpgossip launch on each host, or start the peers with mpirun or srun");
  return children;
}

}  // namespace dpg::app
