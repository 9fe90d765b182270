#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/process/find.h"
#include "runtime/process/output.h"
#include "runtime/process/process.h"
#include "runtime/process/run.h"
#include "runtime/process/signals.h"
#include "runtime/core/error.h"

namespace fs = std::filesystem;
using namespace dpg::proc;
using std::chrono::milliseconds;

namespace {

Command sh(const std::string& script) { return Command{{"/bin/sh", "-c", script}, {}}; }

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

bool gone(pid_t pid) { return ::kill(pid, 0) == -1 && errno == ESRCH; }

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh folder, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "dpg_test_process_XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write_file(const fs::path& p, const std::string& text, fs::perms perms) {
  std::ofstream(p) << text;
  fs::permissions(p, perms);
}

// The pid a child script wrote with `echo $$ > file`, once it is there (at most 5 s).
pid_t read_pid(const fs::path& p) {
  for (int i = 0; i < 500; ++i) {
    std::ifstream in(p);
    pid_t pid = 0;
    if (in >> pid && pid > 0) return pid;
    ::usleep(10000);
  }
  FAIL("no pid in " << p);
  return -1;
}

SpawnOptions out_pipe() {
  SpawnOptions o;
  o.out = Stdio::pipe();
  return o;
}

}  // namespace

TEST_CASE("process: run captures stdout and stderr and reports the exit") {
  RunOptions o;
  o.err = Stdio::capture();
  const RunResult r = run(sh("echo out; echo err >&2; printf 'no newline'; exit 3"), o);
  CHECK(r.out == "out\nno newline");
  CHECK(r.err == "err\n");
  CHECK(WIFEXITED(r.status));
  CHECK(exit_code(r.status) == 3);
  CHECK_FALSE(succeeded(r.status));
  CHECK(describe_status(r.status) == "exited with code 3");
}

TEST_CASE("process: arguments reach the program as they are, with no shell between") {
  Command c{{"printf", "%s|", "a b", "$HOME", ";", "*"}, {}};
  CHECK(run(c, {}).out == "a b|$HOME|;|*|");
  Command env = sh("echo \"$DPG_TEST_A/$DPG_TEST_B\"");
  env.env = {{"DPG_TEST_A", "one two"}, {"DPG_TEST_B", "x=y"}};
  CHECK(run(env, {}).out == "one two/x=y\n");
  // A variable already set is replaced, not doubled.
  ::setenv("DPG_TEST_A", "old", 1);
  CHECK(run(env, {}).out == "one two/x=y\n");
  ::unsetenv("DPG_TEST_A");
  Command bad = sh("true");
  bad.env = {{"A=B", "1"}};
  CHECK_THROWS_AS(run(bad, {}), dpg::Error);
}

TEST_CASE("process: captured output is bounded; a child past the bound is stopped") {
  RunOptions o;
  o.capture_limit_bytes = 1000;
  const auto t0 = Clock::now();
  try {
    run(sh("head -c 100000 /dev/zero; exec sleep 30"), o);
    FAIL("expected out_of_range");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::out_of_range);
    CHECK(contains(e.what(), "printed more than 1000 bytes on stdout"));
    CHECK(contains(e.what(), "killed by SIGTERM"));
  }
  CHECK(seconds_since(t0) < 10);
  // Exactly at the bound is fine.
  CHECK(run(sh("head -c 1000 /dev/zero"), o).out == std::string(1000, '\0'));
}

TEST_CASE("process: a deadline that passes stops the child and says so") {
  TempDir dir;
  RunOptions o;
  o.timeout = milliseconds(300);
  o.what = "slow child";
  const auto t0 = Clock::now();
  try {
    run(sh("echo $$ > " + (dir.path / "pid").string() + "; exec sleep 30"), o);
    FAIL("expected deadline_exceeded");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::deadline_exceeded);
    CHECK(contains(e.what(), "slow child did not finish within 300 ms"));
    CHECK(contains(e.what(), "killed by SIGTERM"));
  }
  const double took = seconds_since(t0);
  CHECK(took >= 0.3);
  CHECK(took < 5);
  CHECK(gone(read_pid(dir.path / "pid")));
}

TEST_CASE("process: terminate sends SIGTERM, then SIGKILL to a child that ignores it") {
  SUBCASE("ignored") {
    Process p = Process::spawn(sh("trap '' TERM; exec sleep 30"));
    const pid_t pid = p.pid();
    // Until the trap is set, SIGTERM would end the shell: wait for the exec.
    for (int i = 0; i < 500 && fs::read_symlink("/proc/" + std::to_string(pid) + "/exe").filename() != "sleep"; ++i)
      ::usleep(10000);
    const auto t0 = Clock::now();
    const auto status = p.terminate(milliseconds(400));
    const double took = seconds_since(t0);
    REQUIRE(status);
    CHECK(describe_status(*status) == "killed by SIGKILL");
    CHECK(exit_code(*status) == 128 + SIGKILL);
    CHECK(took >= 0.4);
    CHECK(took < 5);
    CHECK(gone(pid));
    CHECK_FALSE(p.signal(SIGTERM));  // reaped: never signalled again
  }
  SUBCASE("handled") {
    Process p = Process::spawn(sh("trap 'exit 7' TERM; echo ready; while :; do sleep 0.05; done"),
                               out_pipe());
    Drain out = Drain::capture(p.take_out_fd(), 100);
    for (int i = 0; i < 500 && out.text().empty(); ++i) {
      ::usleep(10000);
      out.read_some(1);
    }
    const auto status = p.terminate(milliseconds(5000));
    REQUIRE(status);
    CHECK(describe_status(*status) == "exited with code 7");
  }
}

TEST_CASE("process: wait_until, poll, and a destroyed Process stops its child") {
  pid_t pid = -1;
  {
    SpawnOptions so;
    so.stop_grace = milliseconds(2000);
    Process p = Process::spawn(Command{{"sleep", "30"}, {}}, so);
    pid = p.pid();
    CHECK(p.running());
    CHECK_FALSE(p.poll());
    const auto t0 = Clock::now();
    CHECK_FALSE(p.wait_until(Clock::now() + milliseconds(100)));
    CHECK(seconds_since(t0) >= 0.1);
    CHECK(p.running());
  }
  CHECK(gone(pid));
  Process quick = Process::spawn(sh("exit 0"));
  const auto status = quick.wait_until(Clock::now() + std::chrono::seconds(10));
  REQUIRE(status);
  CHECK(succeeded(*status));
  CHECK_FALSE(quick.running());
}

TEST_CASE("process: output to a file, a process group of its own") {
  TempDir dir;
  const fs::path out = dir.path / "out.txt";
  RunOptions o;
  o.out = Stdio::file(out.string());
  CHECK(succeeded(run(sh("echo to the file"), o).status));
  CHECK(slurp(out) == "to the file\n");
  o.out = Stdio::file((dir.path / "no-such-folder" / "x").string());
  CHECK_THROWS_AS(run(sh("true"), o), dpg::Error);

  SpawnOptions group;
  group.own_process_group = true;
  Process p = Process::spawn(Command{{"sleep", "30"}, {}}, group);
  CHECK(::getpgid(p.pid()) == p.pid());
  p.terminate(milliseconds(2000));
}

TEST_CASE("process: a program that cannot start is an error from spawn") {
  TempDir dir;
  try {
    SpawnOptions named;
    named.what = "rank 4";
    Process::spawn(Command{{"dpg-no-such-program"}, {}}, named);
    FAIL("expected not_found");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::not_found);
    CHECK(contains(e.what(), "rank 4"));
    CHECK(contains(e.what(), "dpg-no-such-program"));
  }
  // Executable but not a program: execve itself fails, and the parent hears why.
  write_file(dir.path / "text", "just words\n", fs::perms::owner_all);
  try {
    Process::spawn(Command{{(dir.path / "text").string()}, {}});
    FAIL("expected failed_precondition");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::failed_precondition);
    CHECK(contains(e.what(), "cannot execute"));
    CHECK(contains(e.what(), "Exec format error"));
  }
  CHECK_THROWS_AS(Process::spawn(Command{{}, {}}), dpg::Error);
}

TEST_CASE("process: find_program looks beside the running binary, then in PATH") {
  TempDir dir;
  write_file(dir.path / "dpg-tool", "#!/bin/sh\n", fs::perms::owner_all);
  write_file(dir.path / "dpg-data", "x\n", fs::perms::owner_read | fs::perms::owner_write);
  const fs::path self = self_path();
  REQUIRE(fs::exists(self));

  Search beside_only;
  beside_only.path = false;
  CHECK(find_program(self.filename().string(), beside_only) == self);
  Search up;
  up.beside_self = {".."};
  up.path = false;
  CHECK(find_program(self.parent_path().filename().string() + "/" + self.filename().string(),
                     up) == self.lexically_normal());
  CHECK(contains(where_searched(up), self.parent_path().parent_path().string()));
  CHECK(where_searched(Search{}) == self.parent_path().string() + " and PATH");

  const std::string old_path = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", ("/nonexistent:" + dir.path.string()).c_str(), 1);
  CHECK(find_program("dpg-tool") == dir.path / "dpg-tool");
  CHECK(find_program("dpg-tool", beside_only) == std::nullopt);
  CHECK(find_program("dpg-data") == std::nullopt);  // not executable
  Search any_file;
  any_file.executable = false;
  CHECK(find_program("dpg-data", any_file) == dir.path / "dpg-data");
  ::setenv("PATH", old_path.c_str(), 1);

  CHECK(find_program("sh").has_value());
  CHECK(find_program("/bin/sh") == fs::path("/bin/sh"));
  CHECK(find_program("/nonexistent/sh") == std::nullopt);
  CHECK(find_program("dpg-no-such-program-anywhere") == std::nullopt);
  CHECK(find_program("") == std::nullopt);
}

TEST_CASE("process: describe_status names the exit code or the signal") {
  CHECK(describe_status(3 << 8) == "exited with code 3");
  CHECK(describe_status(0) == "exited with code 0");
  CHECK(describe_status(SIGKILL) == "killed by SIGKILL");
  CHECK(describe_status(SIGSEGV | 0x80) == "killed by SIGSEGV (core dumped)");
  CHECK(contains(describe_status(kStatusLost), "lost"));
  CHECK(exit_code(kStatusLost) == 1);
  CHECK(signal_name(SIGTERM) == "SIGTERM");
  CHECK(duration_text(milliseconds(2000)) == "2 s");
  CHECK(duration_text(milliseconds(300)) == "300 ms");
  // From real children.
  CHECK(describe_status(run(sh("kill -KILL $$"), {}).status) == "killed by SIGKILL");
  CHECK(describe_status(run(sh("exit 42"), {}).status) == "exited with code 42");
}

TEST_CASE("process: prefixed output keeps lines whole, splits very long ones, ends the last") {
  TempDir dir;
  const fs::path file = dir.path / "sink";
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  {
    Sink sink(fd);
    Process p = Process::spawn(
        sh("echo one; printf 'two\\nthr'; sleep 0.05; printf 'ee\\n'; head -c 70000 /dev/zero | "
           "tr '\\0' a; printf '\\nlast'"),
        out_pipe());
    Drain d = Drain::prefixed(p.take_out_fd(), "[3] ", sink);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (d.open() && Clock::now() < deadline) {
      d.read_some(4);
      ::usleep(1000);
    }
    CHECK_FALSE(d.open());
    CHECK(p.wait_until(deadline));
  }
  ::close(fd);
  const std::string a64k(Drain::kMaxLineBytes, 'a');
  CHECK(slurp(file) == "[3] one\n[3] two\n[3] three\n[3] " + a64k + "\n[3] " +
                           std::string(70000 - Drain::kMaxLineBytes, 'a') + "\n[3] last\n");
}

TEST_CASE("process: run passes output through behind a prefix") {
  TempDir dir;
  const fs::path file = dir.path / "stdout";
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  std::fflush(stdout);
  const int saved = ::dup(1);
  REQUIRE(saved >= 0);
  ::dup2(fd, 1);
  RunOptions o;
  o.out = Stdio::prefixed("[gloo] ");
  const RunResult r = run(sh("echo a; echo b"), o);
  ::dup2(saved, 1);
  ::close(saved);
  ::close(fd);
  CHECK(succeeded(r.status));
  CHECK(r.out.empty());
  CHECK(slurp(file) == "[gloo] a\n[gloo] b\n");
}

TEST_CASE("process: a signal pipe turns signals into bytes, one owner at a time") {
  struct sigaction before {};
  ::sigaction(SIGUSR1, nullptr, &before);
  {
    SignalPipe pipe({SIGUSR1, SIGUSR2});
    CHECK(pipe.take().empty());
    ::raise(SIGUSR1);
    ::raise(SIGUSR2);
    ::raise(SIGUSR1);
    CHECK(pipe.take() == std::vector<int>{SIGUSR1, SIGUSR2, SIGUSR1});
    CHECK_THROWS_AS(SignalPipe({SIGUSR1}), dpg::Error);
  }
  struct sigaction after {};
  ::sigaction(SIGUSR1, nullptr, &after);
  const bool restored = after.sa_handler == before.sa_handler;
  CHECK(restored);
  SignalPipe again({SIGUSR1});  // the slot is free again
}
