#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "apps/launch.h"
#include "runtime/core/error.h"
#include "runtime/net/hosts.h"

namespace fs = std::filesystem;
using dpg::app::Child;
using dpg::app::SuperviseOptions;
using Clock = std::chrono::steady_clock;

namespace {

Child sh(const std::string& label, const std::string& script) {
  return Child{label, {"/bin/sh", "-c", script}, {}};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Runs supervise() with stdout and stderr captured in files; records the pids it started.
struct Run {
  int rc = -1;
  std::string out, err;
  std::vector<pid_t> pids;
  double seconds = 0;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Run run_children(const std::vector<Child>& children, SuperviseOptions o = {}) {
  std::string tmpl = (fs::temp_directory_path() / "dpg_test_launch_XXXXXX").string();
  REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
  // Removed, its files closed, also when supervise throws (a command that cannot run).
  struct Dir {
    fs::path path;
    int out = -1, err = -1;
    ~Dir() {
      if (out >= 0) ::close(out);
      if (err >= 0) ::close(err);
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } dir{tmpl};
  dir.out = ::open((dir.path / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  dir.err = ::open((dir.path / "err").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(dir.out >= 0);
  REQUIRE(dir.err >= 0);
  Run r;
  o.out_fd = dir.out;
  o.err_fd = dir.err;
  o.on_start = [&r, then = o.on_start](size_t i, pid_t pid) {
    r.pids.push_back(pid);
    if (then) then(i, pid);
  };
  const auto t0 = Clock::now();
  r.rc = dpg::app::supervise(children, o);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.out = slurp(dir.path / "out");
  r.err = slurp(dir.path / "err");
  return r;
}

bool gone(pid_t pid) { return ::kill(pid, 0) == -1 && errno == ESRCH; }

}  // namespace

TEST_CASE("launch: all children succeed; each line is prefixed, stdout and stderr kept apart") {
  const Run r = run_children({sh("0", "echo zero out; echo zero err >&2"),
                           sh("1", "echo one out; echo one err >&2; echo two lines")});
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "[0] zero out\n"));
  CHECK(contains(r.out, "[1] one out\n"));
  CHECK(contains(r.out, "[1] two lines\n"));
  CHECK(contains(r.err, "[0] zero err\n"));
  CHECK(contains(r.err, "[1] one err\n"));
  CHECK_FALSE(contains(r.out, "err"));
  CHECK_FALSE(contains(r.err, "out"));
  CHECK(r.pids.size() == 2);
}

TEST_CASE("launch: lines from several busy children stay whole") {
  std::vector<Child> children;
  for (int i = 0; i < 3; ++i)
    children.push_back(sh(std::to_string(i), "i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); done"));
  const Run r = run_children(children);
  CHECK(r.rc == 0);
  std::istringstream lines(r.out);
  std::string line;
  std::map<std::string, int> count;
  const std::regex form(R"(\[([0-2])\] line [0-9]+)");
  int bad = 0;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (std::regex_match(line, m, form)) ++count[m[1]];
    else ++bad;
  }
  CHECK(bad == 0);
  CAPTURE(r.err);
  for (const std::string label : {"0", "1", "2"}) {
    CAPTURE(label);
    CHECK(count[label] == 2000);
  }
}

TEST_CASE("launch: a child that exits during start-up does not stop the others from starting") {
  // Rank 0 is done before rank 1 starts: its SIGCHLD is pending then, and is no reason to stop.
  SuperviseOptions o;
  o.on_start = [](size_t i, pid_t pid) {
    if (i != 0) return;
    siginfo_t info{};
    ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT);  // exited, not reaped
  };
  const Run r = run_children({sh("0", "echo zero"), sh("1", "echo one")}, o);
  CHECK(r.rc == 0);
  CHECK(r.pids.size() == 2);
  CHECK(r.out.find("[0] zero\n") != std::string::npos);
  CHECK(r.out.find("[1] one\n") != std::string::npos);
}

TEST_CASE("launch: a partial last line is flushed at end of file; long lines are split") {
  Run r = run_children({sh("7", "printf 'first\\nno newline'; printf 'err tail' >&2")});
  CHECK(r.rc == 0);
  CHECK(r.out == "[7] first\n[7] no newline\n");
  CHECK(r.err == "[7] err tail\n");
  r = run_children({sh("8", "head -c 100000 /dev/zero | tr '\\0' a")});
  CHECK(r.rc == 0);
  const std::string a64k(64 * 1024, 'a');
  CHECK(r.out == "[8] " + a64k + "\n[8] " + std::string(100000 - 64 * 1024, 'a') + "\n");
}

TEST_CASE("launch: one child fails, the others are stopped at once and its code is returned") {
  SuperviseOptions o;
  o.grace = std::chrono::milliseconds(2000);
  const Run r = run_children({sh("0", "exec sleep 60"), sh("1", "sleep 0.2; echo bye >&2; exit 3"),
                           sh("2", "exec sleep 60")},
                          o);
  CHECK(r.rc == 3);
  CHECK(r.seconds < 2.0);  // SIGTERM ends sleep at once; no need to wait for the grace period

  CHECK(contains(r.err, "rank 1 failed: exited with code 3; stopping the other 2 ranks"));
  CHECK(contains(r.err, "rank 0 stopped: killed by SIGTERM"));
  CHECK(contains(r.err, "rank 2 stopped: killed by SIGTERM"));
  // The failure is reported after the output the rank wrote before it.
  CHECK(r.err.find("[1] bye\n") < r.err.find("rank 1 failed"));
  REQUIRE(r.pids.size() == 3);
  for (pid_t pid : r.pids) CHECK(gone(pid));
}

TEST_CASE("launch: a child killed by a signal is reported by name; 128 + signal is returned") {
  const Run r = run_children({sh("0", "exec sleep 60"), sh("1", "kill -USR1 $$")});
  CHECK(r.rc == 128 + SIGUSR1);
  CHECK(contains(r.err, "rank 1 failed: killed by SIGUSR1"));
  CHECK(r.seconds < 5.0);
  for (pid_t pid : r.pids) CHECK(gone(pid));
}

// A file one child creates once its traps are set and another waits for (at most 10 s) before it
// makes the launcher signal: a fixed delay lost that race on a loaded machine, and the child died
// of a signal its trap was meant to ignore. The folder goes with the object.
namespace {
struct ReadyFile {
  std::string dir = make_dir();
  std::string path = (fs::path(dir) / "ready").string();
  ~ReadyFile() { fs::remove_all(dir); }
  std::string wait() const {
    return "i=0; while [ ! -e '" + path +
           "' ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done; ";
  }
  std::string create() const { return ": > '" + path + "'; "; }
  static std::string make_dir() {
    std::string tmpl = (fs::temp_directory_path() / "dpg_test_launch_ready_XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    return tmpl;
  }
};
}  // namespace

TEST_CASE("launch: a child that ignores SIGTERM gets SIGKILL after the grace period") {
  SuperviseOptions o;
  o.grace = std::chrono::milliseconds(300);
  const ReadyFile ready;
  const Run r = run_children({sh("0", "trap '' TERM; " + ready.create() + "exec sleep 60"),
                              sh("1", ready.wait() + "sleep 0.2; exit 5")},
                             o);
  CHECK(r.rc == 5);
  CHECK(r.seconds >= 0.45);
  CHECK(r.seconds < 3.0);
  CHECK(contains(r.err, "rank 0 did not stop within 300 ms of SIGTERM; sending SIGKILL"));
  CHECK(contains(r.err, "rank 0 stopped: killed by SIGKILL"));
  for (pid_t pid : r.pids) CHECK(gone(pid));
}

TEST_CASE("launch: SIGINT and SIGTERM to the launcher are passed on to every child") {
  struct sigaction before {};
  ::sigaction(SIGTERM, nullptr, &before);
  SuperviseOptions o;
  o.grace = std::chrono::milliseconds(2000);
  // The child signals its parent, the process running run_children().
  Run r = run_children({sh("0", "exec sleep 60"), sh("1", "sleep 0.2; kill -INT $PPID; exec sleep 60")}, o);
  CHECK(r.rc == 130);
  CHECK(r.seconds < 2.0);
  CHECK(contains(r.err, "got SIGINT; passing SIGINT to 2 ranks"));
  // Each child got SIGINT itself (not the SIGTERM of a failure).
  CHECK(contains(r.err, "rank 0 stopped: killed by SIGINT"));
  CHECK(contains(r.err, "rank 1 stopped: killed by SIGINT"));
  for (pid_t pid : r.pids) CHECK(gone(pid));

  r = run_children({sh("0", "sleep 0.2; kill -TERM $PPID; exec sleep 60")}, o);
  CHECK(r.rc == 128 + SIGTERM);
  CHECK(contains(r.err, "got SIGTERM; passing SIGTERM to 1 rank"));
  CHECK(contains(r.err, "rank 0 stopped: killed by SIGTERM"));
  for (pid_t pid : r.pids) CHECK(gone(pid));

  // A hang-up becomes SIGTERM, the signal peers stop gracefully on.
  r = run_children({sh("0", "sleep 0.2; kill -HUP $PPID; exec sleep 60")}, o);
  CHECK(r.rc == 128 + SIGHUP);
  CHECK(contains(r.err, "got SIGHUP; passing SIGTERM to 1 rank"));
  CHECK(contains(r.err, "rank 0 stopped: killed by SIGTERM"));

  // The handlers are gone afterwards: SIGTERM is back to its previous disposition.
  struct sigaction after {};
  ::sigaction(SIGTERM, nullptr, &after);
  const bool restored = after.sa_handler == before.sa_handler;
  CHECK(restored);
}

TEST_CASE("launch: a second signal to the launcher sends SIGKILL without waiting out the grace") {
  SuperviseOptions o;
  o.grace = std::chrono::milliseconds(20000);
  // Rank 0 survives the forwarded SIGINT and asks for the second; rank 1 ignores it too. Rank 0
  // signals once rank 1's trap is set.
  const ReadyFile ready;
  const Run r = run_children(
      {sh("0", "trap '' INT TERM; " + ready.wait() +
                   "kill -INT $PPID; sleep 0.3; kill -INT $PPID; exec sleep 60"),
       sh("1", "trap '' INT TERM; " + ready.create() + "exec sleep 60")},
      o);
  CHECK(r.rc == 130);
  CHECK(r.seconds < 5.0);
  CHECK(contains(r.err, "got SIGINT; passing SIGINT to 2 ranks"));
  CHECK(contains(r.err, "got SIGINT again; sending SIGKILL to 2 ranks"));
  CHECK(contains(r.err, "rank 0 stopped: killed by SIGKILL"));
  CHECK(contains(r.err, "rank 1 stopped: killed by SIGKILL"));
  for (pid_t pid : r.pids) CHECK(gone(pid));
}

TEST_CASE("launch: children run in process groups of their own") {
  std::vector<pid_t> groups;
  SuperviseOptions o;
  o.on_start = [&groups](size_t, pid_t pid) { groups.push_back(::getpgid(pid)); };
  std::vector<pid_t> pids;
  auto record = o.on_start;
  o.on_start = [&](size_t i, pid_t pid) {
    pids.push_back(pid);
    record(i, pid);
  };
  CHECK(dpg::app::supervise({sh("0", "sleep 0.1"), sh("1", "sleep 0.1")}, o) == 0);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0] == pids[0]);
  CHECK(groups[1] == pids[1]);
  CHECK(groups[0] != ::getpgrp());
}

TEST_CASE("launch: environment, stdin from /dev/null, grandchildren holding a pipe") {
  SuperviseOptions o;
  o.drain = std::chrono::milliseconds(200);
  Child c = sh("0", "echo \"var=$DPG_TEST_VAR\"; cat; echo after-cat");
  c.env.push_back({"DPG_TEST_VAR", "forty two"});
  const Run r = run_children({c, sh("1", "(sleep 2; echo late) & echo early")}, o);
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "[0] var=forty two\n"));
  CHECK(contains(r.out, "[0] after-cat\n"));
  CHECK(contains(r.out, "[1] early\n"));
  CHECK_FALSE(contains(r.out, "late"));
  CHECK(r.seconds < 1.5);
}

TEST_CASE("launch: a command that cannot run is an error before anything starts") {
  try {
    run_children({sh("0", "exec sleep 60"), Child{"1", {"dpg-no-such-program"}, {}}});
    FAIL("expected an error");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::not_found);
    CHECK(contains(e.what(), "rank 1"));
    CHECK(contains(e.what(), "dpg-no-such-program"));
  }
  CHECK_THROWS_AS(run_children({Child{"0", {"/nonexistent/dpg"}, {}}}), dpg::Error);
  CHECK_THROWS_AS(run_children({Child{"0", {}, {}}}), dpg::Error);
  CHECK_THROWS_AS(run_children({}), dpg::Error);
  // A program found in PATH runs.
  CHECK(run_children({Child{"0", {"true"}, {}}}).rc == 0);
}

TEST_CASE("launch: local_children builds one command per local peer") {
  const dpg::Json doc = {{"peers",
                          {{{"rank", 0}, {"host", "127.0.0.1"}, {"port", 29500}},
                           {{"rank", 1}, {"host", "192.0.2.1"}, {"port", 29500}},
                           {{"rank", 2}, {"host", "localhost"}, {"port", 29501}}}}};
  const auto hosts = dpg::net::parse_hosts(doc, "h.json");
  auto children = dpg::app::local_children(hosts, "h.json", "/bin/dpgossip", {"train", "--epochs", "1"});
  REQUIRE(children.size() == 2);
  CHECK(children[0].label == "0");
  CHECK(children[0].argv == std::vector<std::string>{"/bin/dpgossip", "train", "--epochs", "1",
                                                     "--hosts", "h.json", "--rank", "0"});
  CHECK(children[1].label == "2");
  CHECK(children[1].argv.back() == "2");

  children = dpg::app::local_children(hosts, "h.json", "/bin/dpgossip", {"train", "--hosts=other.json"});
  CHECK(children[0].argv == std::vector<std::string>{"/bin/dpgossip", "train", "--hosts=other.json",
                                                     "--rank", "0"});

  auto error = [&](const dpg::net::HostsFile& h, const std::vector<std::string>& args) {
    try {
      dpg::app::local_children(h, "h.json", "/bin/dpgossip", args);
    } catch (const dpg::Error& e) {
      CHECK(e.code() == dpg::Code::invalid_argument);
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(contains(error(hosts, {}), "no command after --"));
  CHECK(contains(error(hosts, {"train", "--rank", "1"}), "--rank"));
  const dpg::Json remote = {{"peers", {{{"rank", 0}, {"host", "192.0.2.1"}, {"port", 1}}}}};
  const std::string none = error(dpg::net::parse_hosts(remote, "h.json"), {"train"});
  CHECK(contains(none, "h.json: no peer is on this machine"));
  CHECK(contains(none, "192.0.2.1"));
}

TEST_CASE("launch: a SIGINT during start-up starts no more peers and stops those started") {
  std::vector<Child> children;
  for (int i = 0; i < 6; ++i) children.push_back(sh(std::to_string(i), "exec sleep 60"));
  SuperviseOptions o;
  o.grace = std::chrono::milliseconds(2000);
  std::vector<pid_t> started;
  // The launcher is signalled right after the second peer starts, as a user's Ctrl-C would.
  o.on_start = [&started](size_t i, pid_t pid) {
    started.push_back(pid);
    if (i == 1) ::kill(::getpid(), SIGINT);
  };
  const auto t0 = Clock::now();
  const int rc = dpg::app::supervise(children, o);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(rc == 130);
  CHECK(started.size() == 2);
  CHECK(seconds < 2.0);
  for (pid_t pid : started) CHECK(gone(pid));
}
