#include "apps/launch.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "runtime/process/find.h"
#include "runtime/process/output.h"
#include "runtime/process/process.h"
#include "runtime/process/signals.h"
#include "runtime/core/bounds.h"
#include "runtime/core/error.h"

namespace dpg::app {
namespace {

using proc::Clock;
using proc::duration_text;
using std::chrono::milliseconds;

constexpr milliseconds kPollPeriod{50};  // also how often exits are checked

struct Running {
  std::string label;
  proc::Process process;
  std::optional<proc::Drain> out, err;
  bool reported = false;  // its exit has been handled
};

std::string other_ranks(size_t n) {
  return n == 1 ? "the other rank" : "the other " + std::to_string(n) + " ranks";
}

std::string ranks(size_t n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); }

class Supervisor {
 public:
  // Checks every command before anything starts, so a typo starts no one.
  Supervisor(const std::vector<Child>& children, const SuperviseOptions& o)
      : children_(children), o_(o), out_(o.out_fd), err_(o.err_fd) {
    for (const Child& c : children) {
      if (c.argv.empty()) fail(Code::invalid_argument, "launch: rank " + c.label + ": empty command");
      proc::require_program(c.argv.front(), "launch: rank " + c.label);
    }
    running_.resize(children.size());
    // SIGCHLD only wakes the loop, so that a child's exit is seen at once rather than at the
    // next poll period (a whole launch of short commands took 50 ms longer).
    if (o.handle_signals) {
      signals_.emplace(std::initializer_list<int>{SIGINT, SIGTERM, SIGHUP, SIGCHLD});
    }
  }

  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  void start_all();
  int run();

 private:
  void say(const std::string& line) { err_.put("dpgossip launch: " + line + "\n"); }
  void on_signals();
  void reap();
  void on_exit(Running& r);
  void stop();
  void signal_all(int signo);
  size_t unreaped() const;
  bool streams_open() const;

  const std::vector<Child>& children_;
  const SuperviseOptions& o_;
  proc::Sink out_, err_;
  std::optional<proc::SignalPipe> signals_;
  // Destroyed before the sinks and the signal pipe: a child still running then is stopped.
  std::vector<Running> running_;

  int result_ = 0;
  int got_signal_ = 0;
  bool stopping_ = false, killed_ = false;
  Clock::time_point term_deadline_, kill_deadline_;
  std::optional<Clock::time_point> drain_deadline_;
};

// On an error path: every child still running is stopped together (SIGTERM, SIGKILL `grace`
// later), not one after the other by its Process's destructor.
Supervisor::~Supervisor() {
  if (unreaped() == 0) return;
  signal_all(SIGTERM);
  for (int round = 0; round < 2; ++round) {
    const auto deadline = Clock::now() + (round == 0 ? o_.grace : o_.kill_wait);
    for (Running& r : running_) r.process.wait_until(deadline);
    if (round == 0) signal_all(SIGKILL);
  }
}

void Supervisor::start_all() {
  for (size_t i = 0; i < children_.size(); ++i) {
    // A SIGINT or SIGTERM during start-up starts no one more; run() then stops those started.
    // (A SIGCHLD, from a child started before that already exited, is no reason to stop.)
    if (signals_) {
      pollfd pending{signals_->fd(), POLLIN, 0};
      if (::poll(&pending, 1, 0) > 0) on_signals();
      if (got_signal_ != 0) return;
    }
    const Child& c = children_[i];
    proc::SpawnOptions so;
    so.out = proc::Stdio::pipe();
    so.err = proc::Stdio::pipe();
    so.own_process_group = true;
    so.stop_grace = o_.grace;
    so.what = "launch: rank " + c.label;
    Running& r = running_[i];
    r.label = c.label;
    r.process = proc::Process::spawn({c.argv, c.env}, so);
    r.out = proc::Drain::prefixed(r.process.take_out_fd(), "[" + c.label + "] ", out_);
    r.err = proc::Drain::prefixed(r.process.take_err_fd(), "[" + c.label + "] ", err_);
    if (o_.on_start) o_.on_start(i, r.process.pid());
  }
}

size_t Supervisor::unreaped() const {
  size_t n = 0;
  for (const Running& r : running_) n += r.process.running() ? 1 : 0;
  return n;
}

bool Supervisor::streams_open() const {
  for (const Running& r : running_) {
    if ((r.out && r.out->open()) || (r.err && r.err->open())) return true;
  }
  return false;
}

void Supervisor::signal_all(int signo) {
  for (Running& r : running_) r.process.signal(signo);
}

void Supervisor::stop() {
  if (stopping_) return;
  stopping_ = true;
  term_deadline_ = Clock::now() + o_.grace;
  signal_all(SIGTERM);
}

void Supervisor::on_exit(Running& r) {
  // Output written before the exit goes out before the message about it.
  if (r.out) r.out->read_some(64);
  if (r.err) r.err->read_some(64);
  const int status = *r.process.status();
  if (stopping_) {
    say("rank " + r.label + " stopped: " + proc::describe_status(status));
    return;
  }
  if (proc::succeeded(status)) return;
  result_ = proc::exit_code(status);
  const size_t others = unreaped();
  say("rank " + r.label + " failed: " + proc::describe_status(status) +
      (others > 0 ? "; stopping " + other_ranks(others) + " (SIGTERM, SIGKILL after " +
                        duration_text(o_.grace) + ")"
                  : ""));
  stop();
}

void Supervisor::reap() {
  for (Running& r : running_) {
    if (r.reported || !r.process.poll()) continue;
    r.reported = true;
    on_exit(r);
  }
}

void Supervisor::on_signals() {
  if (!signals_) return;
  for (const int signo : signals_->take()) {
    if (signo == SIGCHLD) continue;  // reap() looks at every child next
    if (got_signal_ != 0) {
      if (!killed_ && unreaped() > 0) {
        say("got " + proc::signal_name(signo) + " again; sending SIGKILL to " + ranks(unreaped()));
        signal_all(SIGKILL);
        killed_ = true;
        kill_deadline_ = Clock::now() + o_.kill_wait;
      }
      continue;
    }
    got_signal_ = signo;
    const size_t left = unreaped();
    if (stopping_ || left == 0) {
      say("got " + proc::signal_name(signo));
      continue;
    }
    // Passed on as it is, so that a peer can tell a Ctrl-C from a SIGTERM; a hang-up becomes
    // SIGTERM, the signal the peers stop gracefully on.
    const int forward = signo == SIGHUP ? SIGTERM : signo;
    say("got " + proc::signal_name(signo) + "; passing " + proc::signal_name(forward) + " to " +
        ranks(left) + " (SIGKILL after " + duration_text(o_.grace) +
        ", or at once on another SIGINT or SIGTERM)");
    stopping_ = true;
    term_deadline_ = Clock::now() + o_.grace;
    signal_all(forward);
  }
}

int Supervisor::run() {
  std::vector<pollfd> fds;
  std::vector<proc::Drain*> owners;  // per pollfd after the first
  while (true) {
    on_signals();
    reap();
    const auto now = Clock::now();
    if (unreaped() == 0) {
      if (!drain_deadline_) drain_deadline_ = now + o_.drain;
      if (!streams_open() || now >= *drain_deadline_) break;
    }
    if (stopping_ && !killed_ && now >= term_deadline_ && unreaped() > 0) {
      for (const Running& r : running_) {
        if (r.process.running())
          say("rank " + r.label + " did not stop within " + duration_text(o_.grace) +
              " of SIGTERM; sending SIGKILL");
      }
      signal_all(SIGKILL);
      killed_ = true;
      kill_deadline_ = now + o_.kill_wait;
    }
    if (killed_ && now >= kill_deadline_ && unreaped() > 0) {
      for (const Running& r : running_) {
        if (r.process.running())
          say("rank " + r.label + " (pid " + std::to_string(r.process.pid()) + ") did not exit " +
              duration_text(o_.kill_wait) + " after SIGKILL; giving up on it");
      }
      if (result_ == 0) result_ = 1;
      break;
    }
    fds.assign(1, pollfd{signals_ ? signals_->fd() : -1, POLLIN, 0});
    owners.assign(1, nullptr);
    for (Running& r : running_) {
      for (auto* d : {&r.out, &r.err}) {
        if (*d && (*d)->open()) fds.push_back({(*d)->fd(), POLLIN, 0}), owners.push_back(&**d);
      }
    }
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(kPollPeriod.count()));
    if (ready < 0 && errno != EINTR) fail(Code::internal, "launch: poll: " + std::string(std::strerror(errno)));
    if (ready <= 0) continue;
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) owners[i]->read_some(1);
    }
  }
  for (Running& r : running_) {  // pipes still held by grandchildren after the drain time
    for (auto* d : {&r.out, &r.err}) {
      if (*d) (*d)->read_some(1), (*d)->close();
    }
  }
  return got_signal_ != 0 ? 128 + got_signal_ : result_;
}

}  // namespace

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
  // The first few remote hosts, for the message when none is local; all 65536 would make a
  // line of a megabyte.
  constexpr int kHostsNamed = 8;
  std::string remote;
  int remotes = 0;
  for (const net::PeerAddress& p : hosts.peers) {
    if (!net::is_local_host(p.host)) {
      if (remotes++ < kHostsNamed) remote += (remote.empty() ? "" : ", ") + shorten(p.host);
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
             (remotes > kHostsNamed ? " and " + std::to_string(remotes - kHostsNamed) + " more"
                                    : std::string()) +
             "); run dpgossip launch on each host, or start the peers with mpirun or srun");
  return children;
}

TempDir::TempDir(const std::string& prefix, const std::string& who) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + prefix + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    fail(Code::failed_precondition, who + ": cannot create a temporary folder " + tmpl);
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace dpg::app
