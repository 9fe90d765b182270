// The shared-memory transport with each peer a thread of this process: collectives through tiny
// rings (every message wraps and fills them) and through direct reads, in both progress modes;
// messages ahead of their receives; and the failures that must end in an error naming rank, peer
// and tag: a deadline, a size mismatch, a peer that stops early, a refused handshake.
#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <sstream>
#include <thread>
#include <vector>

#include "runtime/collective/communicator.h"
#include "runtime/core/error.h"
#include "runtime/core/hash.h"
#include "runtime/net/hosts.h"
#include "runtime/net/shm/shm_socket.h"
#include "runtime/net/shm/shm_transport.h"
#include "tests/unit/net/matching_check.h"
#include "tests/unit/net/poison_check.h"

using dpg::public_value;  // the tests' buffers are synthetic

using namespace std::chrono_literals;
using dpg::collective::Communicator;
using dpg::net::HostsFile;
using dpg::net::ShmOptions;
using dpg::net::ShmTransport;
using dpg::net::Tag;

namespace {

std::vector<int> peers_of(int r, int n) { return dpg::collective::peers_needed(r, n, {}); }

// Runs body on n peer threads over shared memory; returns each rank's error ("" when it passed).
// Each rank connects to `peers[rank]`, or by default to what a communicator needs.
std::vector<std::string> run_shm(int n, ShmOptions o, const std::function<void(ShmTransport&)>& body,
                                 const std::function<ShmOptions(int, ShmOptions)>& per_rank = {},
                                 const std::vector<std::vector<int>>& peers = {}) {
  HostsFile hosts = dpg::net::local_hosts(n);  // the ports only name the sockets
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        ShmTransport t(hosts, r, peers.empty() ? peers_of(r, n) : peers[r],
                       per_rank ? per_rank(r, o) : o);
        body(t);
      } catch (const dpg::Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

std::span<std::byte> bytes(std::vector<float>& v) { return std::as_writable_bytes(std::span(v)); }

void check_sums(ShmTransport& t, std::size_t segment) {
  const int n = t.world();
  Communicator c(t, {segment, 64 * 1024, 3});
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{1001},
                            std::size_t{300000}}) {
    if (segment < 1000 && count > 2000) continue;  // tiny segments: the small sizes suffice
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = float(t.rank()) + float(i % 5);
    c.allreduce(public_value(v));
    for (std::size_t i = 0; i < count; ++i) {
      if (v[i] != float(n * (n - 1) / 2 + n * int(i % 5))) {
        throw dpg::Error(dpg::Code::internal, "wrong sum at " + std::to_string(i));
      }
    }
  }
  std::vector<std::byte> all(64 * static_cast<std::size_t>(n));
  std::vector<std::byte> mine(64, std::byte(t.rank()));
  c.allgather(public_value(mine), all);
  for (int r = 0; r < n; ++r) {
    if (all[64 * r] != std::byte(r)) throw dpg::Error(dpg::Code::internal, "allgather");
  }
  c.barrier();
}

}  // namespace

TEST_CASE("all-reduce over shared memory: wrapping tiny rings and direct reads, both modes") {
  for (bool thread : {false, true}) {
    for (std::size_t direct : {std::size_t{0}, std::size_t{512}}) {
      for (int n : {2, 3, 4}) {
        CAPTURE(thread);
        CAPTURE(direct);
        CAPTURE(n);
        ShmOptions o;
        o.timeout = 20s;
        o.slot_bytes = 256;  // 192 payload bytes: most messages take several slots
        o.slots = 4;
        o.direct_min_bytes = direct;
        o.progress_thread = thread;
        auto errors = run_shm(n, o, [](ShmTransport& t) {
          check_sums(t, 100);
          check_sums(t, 256 * 1024);
        });
        for (auto& e : errors) CHECK_MESSAGE(e == "", e);
      }
    }
  }
}

TEST_CASE("shared memory: receives posted out of order, zero-length and exact-slot messages") {
  ShmOptions o;
  o.timeout = 10s;
  o.slot_bytes = 128;  // 64 payload bytes
  o.slots = 2;
  auto errors = run_shm(2, o, [](ShmTransport& t) {
    std::vector<float> a(16, 1.0f), b(0), c(33, 3.0f);  // 64 bytes: one slot exactly
    if (t.rank() == 1) {
      auto h1 = t.send(0, Tag{9, 1, 0}, bytes(a));
      auto h2 = t.send(0, Tag{9, 1, 1}, bytes(b));
      auto h3 = t.send(0, Tag{9, 1, 2}, bytes(c));
      t.wait(h1);
      t.wait(h2);
      t.wait(h3);
      return;
    }
    std::vector<float> ra(16), rb(0), rc(33);
    auto h3 = t.recv(1, Tag{9, 1, 2}, bytes(rc));  // the last one first
    auto h1 = t.recv(1, Tag{9, 1, 0}, bytes(ra));
    auto h2 = t.recv(1, Tag{9, 1, 1}, bytes(rb));
    t.wait(h3);
    t.wait(h2);
    t.wait(h1);
    if (ra != a || rc != c) throw dpg::Error(dpg::Code::internal, "wrong bytes");
  });
  for (auto& e : errors) CHECK_MESSAGE(e == "", e);
}

TEST_CASE("shared memory: a receive nobody sends times out naming rank, peer, tag and time") {
  ShmOptions o;
  o.timeout = 400ms;
  auto errors = run_shm(2, o, [](ShmTransport& t) {
    if (t.rank() == 1) {
      std::this_thread::sleep_for(1500ms);  // alive but away from the transport
      return;
    }
    std::vector<float> v(4);
    const auto start = std::chrono::steady_clock::now();
    try {
      t.wait(t.recv(1, Tag{9, 3, 1}, bytes(v)));
    } catch (const dpg::Error& e) {
      CHECK(e.code() == dpg::Code::deadline_exceeded);
      CHECK(std::chrono::steady_clock::now() - start < 1300ms);
      throw;
    }
  });
  CHECK(errors[1] == "");
  CHECK_MESSAGE(errors[0].find("rank 0: receive from peer 1 (op 9 round 3 chunk 1, 16 bytes) "
                               "timed out after") != std::string::npos, errors[0]);
  CHECK_MESSAGE(errors[0].find("peer 1 is silent") != std::string::npos, errors[0]);
}

TEST_CASE("shared memory: a size mismatch fails the receiver naming both sizes") {
  ShmOptions o;
  o.timeout = 2s;
  std::atomic<bool> seen{false};
  auto errors = run_shm(2, o, [&seen](ShmTransport& t) {
    std::vector<float> v(t.rank() == 0 ? 5 : 4);
    if (t.rank() == 1) {
      t.wait(t.send(0, Tag{9, 0, 0}, bytes(v)));
      // Stays until the receiver has seen it (at most 10 s), not to leave before it looks.
      for (int i = 0; i < 1000 && !seen.load(); ++i) std::this_thread::sleep_for(10ms);
    } else {
      try {
        t.wait(t.recv(1, Tag{9, 0, 0}, bytes(v)));
      } catch (...) {
        seen = true;
        throw;
      }
      seen = true;
    }
  });
  CHECK_MESSAGE(errors[0].find("peer 1 sent 16 bytes for op 9 round 0 chunk 0 but the receive "
                               "expects 20") != std::string::npos, errors[0]);
}

TEST_CASE("shared memory: a poisoned peer's posted receive is never written; its peer hears why "
          "(poison, or a send it refuses)") {
  for (bool progress : {false, true}) {
    CAPTURE(progress);
    ShmOptions o;
    o.timeout = 3s;
    o.progress_thread = progress;
    const auto run_two = [&](const std::function<void(dpg::net::Transport&)>& body) {
      return run_shm(2, o, [&](ShmTransport& t) { body(t); });
    };
    dpg::test::check_poison(run_two, true);
    dpg::test::check_refused_send_poisons(run_two, true);
  }
}

TEST_CASE("shared memory: a peer that finishes while a receive from it is posted stopped early") {
  ShmOptions o;
  o.timeout = 5s;
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_shm(2, o, [](ShmTransport& t) {
    if (t.rank() == 1) return;  // goodbye at once
    std::vector<float> v(4);
    t.wait(t.recv(1, Tag{9, 0, 0}, bytes(v)));
  });
  CHECK(errors[1] == "");
  CHECK_MESSAGE(errors[0].find("peer 1 has finished and said goodbye, but a receive from it is "
                               "still posted") != std::string::npos, errors[0]);
  CHECK(std::chrono::steady_clock::now() - start < 3s);
}

TEST_CASE("shared memory: peers with different settings refuse each other") {
  ShmOptions o;
  o.timeout = 2s;
  o.connect_timeout = 2s;
  auto errors = run_shm(2, o, [](ShmTransport&) {}, [](int r, ShmOptions x) {
    x.config_hash = static_cast<uint64_t>(r);
    return x;
  });
  for (auto& e : errors) {
    CHECK_MESSAGE(e.find("different training configuration") != std::string::npos, e);
  }
  auto sizes = run_shm(2, o, [](ShmTransport&) {}, [](int r, ShmOptions x) {
    x.slots = r == 0 ? 8 : 16;
    return x;
  });
  for (auto& e : sizes) CHECK_MESSAGE(e.find("uses rings of") != std::string::npos, e);
}

TEST_CASE("shared memory: a peer whose set-up fails tells the peers it already joined why") {
  // Rank 2 joins rank 0, then waits for a rank 3 that never comes and fails its set-up. Rank 0,
  // already past its own set-up and waiting on rank 2, must learn the cause (peer 3), not only
  // that rank 2 went away without a goodbye.
  HostsFile hosts = dpg::net::local_hosts(4);
  ShmOptions o;
  o.timeout = 10s;
  o.connect_timeout = 1s;
  std::string error0, error2;
  std::thread rank0([&] {
    try {
      ShmTransport t(hosts, 0, {2}, o);
      std::vector<float> v(4);
      t.wait(t.recv(2, Tag{9, 0, 0}, bytes(v)));
    } catch (const dpg::Error& e) {
      error0 = e.what();
    }
  });
  try {
    ShmTransport t(hosts, 2, {0, 3}, o);
  } catch (const dpg::Error& e) {
    error2 = e.what();
  }
  rank0.join();
  CHECK_MESSAGE(error2.find("peer 3 never connected") != std::string::npos, error2);
  CHECK_MESSAGE(error0.find("peer 2 aborted") != std::string::npos, error0);
  CHECK_MESSAGE(error0.find("peer 3 never connected") != std::string::npos, error0);
}

TEST_CASE("shared memory: a peer that hears an abort while it computes passes it on at once") {
  // A line 0 - 1 - 2. Rank 0 fails; rank 1's progress thread hears it while rank 1 computes
  // (away from the transport for longer than the timeout) and so stops moving data. Rank 2,
  // waiting on rank 1, must hear the failure through rank 1 well before its own deadline,
  // rather than time out blaming rank 1 as alive but not waiting.
  ShmOptions o;
  o.timeout = 1500ms;
  o.progress_thread = true;
  std::atomic<int> posted{0};
  auto errors = run_shm(3, o, [&posted](ShmTransport& t) {
    std::vector<float> v(4);
    if (t.rank() == 0) {
      // Once the others have posted their receives (at most 10 s): a fixed delay could end
      // before a loaded machine got them there.
      for (int i = 0; i < 1000 && posted.load() < 2; ++i) std::this_thread::sleep_for(10ms);
      throw dpg::Error(dpg::Code::internal, "rank 0: stopping on purpose");
    }
    if (t.rank() == 1) {
      const auto h = t.recv(0, Tag{9, 0, 0}, bytes(v));
      ++posted;
      std::this_thread::sleep_for(2500ms);  // computing
      t.wait(h);
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    const auto h = t.recv(1, Tag{9, 0, 0}, bytes(v));
    ++posted;
    try {
      t.wait(h);
    } catch (const dpg::Error& e) {
      CHECK(e.code() == dpg::Code::aborted);
      CHECK(std::chrono::steady_clock::now() - start < 1000ms);
      throw;
    }
  }, {}, {{1}, {0, 2}, {1}});
  CAPTURE(errors[2]);
  CHECK(errors[2].find("peer 1 aborted: rank 1: peer 0 aborted: rank 0: stopped on an error of "
                       "its own") != std::string::npos);
  CHECK(errors[2].find("timed out") == std::string::npos);
}

TEST_CASE("shared memory: receives match by tag, early messages are queued, B before A; both modes") {
  for (bool thread : {false, true}) {
    CAPTURE(thread);
    ShmOptions o;
    o.timeout = 5s;
    o.progress_thread = thread;
    o.early = dpg::test::kSmallEarly;
    auto errors = run_shm(2, o, [](ShmTransport& t) { dpg::test::out_of_order(t); });
    for (auto& e : errors) CHECK_MESSAGE(e == "", e);
  }
}

TEST_CASE("shared memory: a message past the early queue's bound holds back the later one, named") {
  ShmOptions o;
  o.timeout = 5s;
  o.early = dpg::test::kSmallEarly;
  auto ok = run_shm(2, o, [](ShmTransport& t) { dpg::test::held_past_bound(t, false); });
  for (auto& e : ok) CHECK_MESSAGE(e == "", e);
  o.timeout = 1s;
  auto errors = run_shm(2, o, [](ShmTransport& t) { dpg::test::held_past_bound(t, true); });
  dpg::test::check_held(errors);
}

TEST_CASE("shared memory: an early message of another size than its receive is data_loss") {
  ShmOptions o;
  o.timeout = 5s;
  o.early = dpg::test::kSmallEarly;
  auto errors = run_shm(2, o, [](ShmTransport& t) { dpg::test::early_size_mismatch(t); });
  dpg::test::check_mismatch(errors);
}

TEST_CASE("shared memory: a silent local connection is dropped at its own deadline; the peer joins") {
  ShmOptions o;
  o.timeout = 5s;
  o.connect_timeout = 4s;  // one connection may take a quarter of it: 1 s
  const HostsFile hosts = dpg::net::local_hosts(2);
  std::string error0, error1;
  std::thread zero([&] {
    try {
      ShmTransport t(hosts, 0, {1}, o);
    } catch (const dpg::Error& e) {
      error0 = e.what();
    }
  });
  // A local process connects to rank 0's socket first and says nothing.
  const std::string name = "dpgossip-shm-" + std::to_string(::getuid()) + "-" + [&] {
    std::ostringstream hex;
    hex << std::hex << dpg::fnv1a64("127.0.0.1:" + std::to_string(hosts.peers[0].port));
    return hex.str();
  }();
  sockaddr_un addr;
  const socklen_t len = dpg::net::shm_socket::abstract_address(name, addr);
  const int silent = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(silent >= 0);
  bool connected = false;
  for (int i = 0; i < 300 && !connected; ++i) {  // until rank 0 listens (3 s at most)
    connected = ::connect(silent, reinterpret_cast<sockaddr*>(&addr), len) == 0;
    if (!connected) std::this_thread::sleep_for(10ms);
  }
  REQUIRE(connected);
  try {
    ShmTransport one(hosts, 1, {0}, o);
  } catch (const dpg::Error& e) {
    error1 = e.what();
  }
  zero.join();
  ::close(silent);
  CHECK_MESSAGE(error0.empty(), error0);
  CHECK_MESSAGE(error1.empty(), error1);
}

TEST_CASE("shm: the default busy poll is off where this host has more peers than CPUs") {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  REQUIRE(cpus > 0);
  dpg::net::HostsFile hosts;
  // cpus + 1 peers on this host, and one elsewhere.
  for (long r = 0; r <= cpus + 1; ++r) {
    dpg::net::PeerAddress p;
    p.rank = static_cast<int>(r);
    p.host = r <= cpus ? "127.0.0.1" : "10.0.0.9";
    p.port = static_cast<int>(30000 + r);
    hosts.peers.push_back(p);
  }
  dpg::net::ShmOptions o;
  CHECK(o.busy_poll_us == -1);
  CHECK(dpg::net::resolved_busy_poll_us(hosts, 0, o) == 0);   // cpus + 1 here
  CHECK(dpg::net::resolved_busy_poll_us(hosts, static_cast<int>(cpus + 1), o) == 20);  // alone
  hosts.peers.resize(static_cast<std::size_t>(cpus));  // as many peers as CPUs
  CHECK(dpg::net::resolved_busy_poll_us(hosts, 0, o) == 20);
  o.busy_poll_us = 7;  // asked for: kept
  CHECK(dpg::net::resolved_busy_poll_us(hosts, 0, o) == 7);
}
