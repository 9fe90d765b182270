// The shared-memory transport across real processes (fork): sums through the ring and through
// direct reads of another process's memory; a writer killed in the middle of a message and a
// reader stopped with SIGSTOP, each ending the other side's wait with an error that names it,
// well within the time a hang would take.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

#include "runtime/collective/communicator.h"
#include "runtime/core/error.h"
#include "runtime/net/hosts.h"
#include "runtime/net/shm/shm_transport.h"

using dpg::public_value;  // the tests' buffers are synthetic

using namespace std::chrono_literals;
using dpg::net::HostsFile;
using dpg::net::ShmOptions;
using dpg::net::ShmTransport;
using dpg::net::Tag;

namespace {

using Clock = std::chrono::steady_clock;

// Forks a child that runs body as rank `rank` and exits 0 on success, 1 on an error (printed).
pid_t fork_peer(const HostsFile& hosts, int rank, const std::vector<int>& peers, ShmOptions o,
                const std::function<void(ShmTransport&)>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  int rc = 0;
  try {
    ShmTransport t(hosts, rank, peers, o);
    body(t);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child rank %d: %s\n", rank, e.what());
    rc = 1;
  }
  std::fflush(nullptr);
  ::_exit(rc);
}

// The child's exit status (bounded wait; SIGKILL and -1 past the limit).
int reap(pid_t pid, std::chrono::seconds limit = 20s) {
  const auto until = Clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(5ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::span<std::byte> bytes(std::vector<float>& v) { return std::as_writable_bytes(std::span(v)); }

void sums(ShmTransport& t) {
  dpg::collective::Communicator c(t, {64 * 1024, 16 * 1024, 4});
  const int n = t.world();
  for (std::size_t count : {std::size_t{3}, std::size_t{4096}, std::size_t{1 << 20}}) {
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = float(t.rank() + 1) * float(1 + i % 7);
    c.allreduce(public_value(v));
    for (std::size_t i = 0; i < count; ++i) {
      if (v[i] != float(n * (n + 1) / 2) * float(1 + i % 7)) {
        throw dpg::Error(dpg::Code::internal, "wrong sum at " + std::to_string(i));
      }
    }
  }
}

}  // namespace

TEST_CASE("shared memory across processes: sums through the ring and through direct reads") {
  for (std::size_t direct : {std::size_t{0}, std::size_t{4096}}) {
    CAPTURE(direct);
    ShmOptions o;
    o.timeout = 20s;
    o.slot_bytes = 4096;
    o.slots = 4;
    o.direct_min_bytes = direct;
    constexpr int n = 4;
    const HostsFile hosts = dpg::net::local_hosts(n);
    std::vector<pid_t> kids;
    for (int r = 1; r < n; ++r) {
      kids.push_back(fork_peer(hosts, r, dpg::collective::peers_needed(r, n, {}), o, sums));
    }
    std::string error;
    try {
      ShmTransport t(hosts, 0, dpg::collective::peers_needed(0, n, {}), o);
      // Direct reads need the kernel's permission; the probe in the handshake tells.
      MESSAGE("direct reads to peer 1: " << std::string(t.direct_to(1) ? "yes" : "no (ring only)"));
      sums(t);
    } catch (const dpg::Error& e) {
      error = e.what();
    }
    CHECK_MESSAGE(error == "", error);
    for (pid_t k : kids) CHECK(reap(k) == 0);
  }
}

TEST_CASE("shared memory across processes: a writer killed mid-message is named as gone") {
  ShmOptions o;
  o.timeout = 10s;
  o.slot_bytes = 4096;
  o.slots = 4;  // a 64 KiB message fills the ring and waits half-written
  const HostsFile hosts = dpg::net::local_hosts(2);
  const pid_t child = fork_peer(hosts, 1, {0}, o, [](ShmTransport& t) {
    std::vector<float> v(16384, 1.0f);
    t.wait(t.send(0, Tag{9, 0, 0}, bytes(v)));  // blocks: nobody reads yet
  });
  std::string error;
  dpg::Code code = dpg::Code::internal;
  Clock::duration took{};
  try {
    ShmTransport t(hosts, 0, {1}, o);
    std::this_thread::sleep_for(200ms);  // the child has filled the ring by now
    ::kill(child, SIGKILL);
    std::vector<float> v(16384);
    const auto start = Clock::now();
    try {
      t.wait(t.recv(1, Tag{9, 0, 0}, bytes(v)));
    } catch (const dpg::Error& e) {
      took = Clock::now() - start;
      throw;
    }
  } catch (const dpg::Error& e) {
    error = e.what();
    code = e.code();
  }
  CHECK(reap(child) == 128 + SIGKILL);
  CHECK(code == dpg::Code::unavailable);
  CHECK_MESSAGE(error.find("rank 0: receive from peer 1 (op 9 round 0 chunk 0, 65536 bytes) "
                           "failed: peer 1 is gone") != std::string::npos, error);
  CHECK(took < 2s);  // seen at once, not at the 10 s deadline
}

TEST_CASE("shared memory across processes: a stopped reader is named when the send times out") {
  ShmOptions o;
  o.timeout = 600ms;
  o.slot_bytes = 4096;
  o.slots = 4;
  const HostsFile hosts = dpg::net::local_hosts(2);
  const pid_t child = fork_peer(hosts, 1, {0}, o, [](ShmTransport& t) {
    std::vector<float> v(16384);
    auto h = t.recv(0, Tag{9, 0, 0}, bytes(v));
    ::raise(SIGSTOP);  // never reads
    t.wait(h);
  });
  std::string error;
  dpg::Code code = dpg::Code::internal;
  const auto start = Clock::now();
  try {
    ShmTransport t(hosts, 0, {1}, o);
    std::vector<float> v(16384, 2.0f);
    t.wait(t.send(1, Tag{9, 0, 0}, bytes(v)));
  } catch (const dpg::Error& e) {
    error = e.what();
    code = e.code();
  }
  const auto took = Clock::now() - start;
  ::kill(child, SIGKILL);
  reap(child);
  CHECK(code == dpg::Code::deadline_exceeded);
  CHECK_MESSAGE(error.find("rank 0: send to peer 1 (op 9 round 0 chunk 0, 65536 bytes) timed out") !=
                    std::string::npos, error);
  CHECK_MESSAGE(error.find("is stopped") != std::string::npos, error);
  CHECK(took < 3s);
}

TEST_CASE("shared memory across processes: a dead writer is named even behind a parked message") {
  ShmOptions o;
  o.timeout = 10s;
  const HostsFile hosts = dpg::net::local_hosts(2);
  // The child leaves a whole message the parent has posted no receive for, then is killed.
  const pid_t child = fork_peer(hosts, 1, {0}, o, [](ShmTransport& t) {
    std::vector<float> v(16, 1.0f);
    t.wait(t.send(0, Tag{9, 0, 5}, bytes(v)));
    ::raise(SIGKILL);
  });
  std::string error;
  Clock::duration took{};
  const auto start = Clock::now();
  try {
    ShmTransport t(hosts, 0, {1}, o);
    std::vector<float> v(16);
    t.wait(t.recv(1, Tag{9, 0, 1}, bytes(v)));  // never sent: the parked one is chunk 5
  } catch (const dpg::Error& e) {
    error = e.what();
    took = Clock::now() - start;
  }
  CHECK(reap(child) == 128 + SIGKILL);
  CHECK_MESSAGE(error.find("peer 1 is gone") != std::string::npos, error);
  CHECK(took < 3s);
}
