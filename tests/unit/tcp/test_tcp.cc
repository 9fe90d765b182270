// The TCP transport on loopback, with each peer a thread of this process: collectives over real
// sockets, the handshake's refusals, and failures that must end in an error, never a hang.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "runtime/collective/communicator.h"
#include "runtime/core/error.h"
#include "runtime/net/hosts.h"
#include "runtime/net/tcp/tcp_transport.h"
#include "tests/unit/net/matching_check.h"
#include "tests/unit/net/poison_check.h"
#include "tests/unit/tcp/tcp_test_util.h"

using dpg::public_value;  // the tests' buffers are synthetic

using namespace std::chrono_literals;
using dpg::collective::Communicator;
using dpg::net::HostsFile;
using dpg::net::TcpOptions;
using dpg::net::TcpTransport;

using dpg::test::run_tcp;

TEST_CASE("all-reduce over TCP: 4 peers, odd and large sizes, tiny and default segments") {
  for (bool thread : {false, true}) {
  CAPTURE(thread);
  TcpOptions o;
  o.timeout = 20s;
  o.progress_thread = thread;
  auto errors = run_tcp(4, o, [](TcpTransport& t) {
    for (std::size_t seg : {std::size_t{16}, std::size_t{256 * 1024}}) {
      for (std::size_t small : {std::size_t{0}, std::size_t{64 * 1024}}) {
      Communicator c(t, {seg, small, 3});
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{5},
                                std::size_t{1001}, std::size_t{4 << 20}}) {
        if (seg < 100 && count > 2000) continue;
        std::vector<float> v(count);
        for (std::size_t i = 0; i < count; ++i) v[i] = float(t.rank()) + float(i % 5);
        c.allreduce(public_value(v));
        for (std::size_t i = 0; i < count; ++i) {
          if (v[i] != float(6 + 4 * int(i % 5))) {
            throw dpg::Error(dpg::Code::internal, "wrong sum at " + std::to_string(i));
          }
        }
      }
      c.barrier();
      }
    }
  });
  for (auto& e : errors) CHECK_MESSAGE(e == "", e);
  }
}

TEST_CASE("peers with different config hashes refuse to connect and say why") {
  TcpOptions o;
  o.connect_timeout = 5s;
  auto errors = run_tcp(
      2, o, [](TcpTransport&) {},
      [](int r, TcpOptions& opt, HostsFile&) { opt.config_hash = r == 0 ? 0x1111 : 0x2222; });
  bool named = false;
  for (auto& e : errors) named = named || e.find("different training configuration") != e.npos;
  CHECK(named);
}

TEST_CASE("a peer that never starts fails the set-up within the deadline, naming it") {
  HostsFile hosts = dpg::net::local_hosts(2);
  TcpOptions o;
  o.connect_timeout = 800ms;
  auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  try {
    TcpTransport t(hosts, 1, {0}, o);
  } catch (const dpg::Error& e) {
    msg = e.what();
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK(msg.find("peer 0") != std::string::npos);
  CHECK(msg.find("never answered") != std::string::npos);
}

TEST_CASE("a stalled peer makes the others time out naming the peer and the round") {
  TcpOptions o;
  o.timeout = 500ms;
  auto t0 = std::chrono::steady_clock::now();
  auto errors = run_tcp(3, o, [](TcpTransport& t) {
    Communicator c(t);
    std::vector<float> v(1000, 1.0f);
    c.allreduce(public_value(v));  // round 0 completes everywhere
    if (t.rank() == 2) {
      std::this_thread::sleep_for(1500ms);  // alive but silent
      return;
    }
    c.allreduce(public_value(v));  // round 1: peers 0 and 1 wait on peer 2
  });
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CAPTURE(errors[0]);
  CAPTURE(errors[1]);
  CHECK(errors[0].find("round 1") != std::string::npos);
  bool named = false;
  for (int r : {0, 1}) named = named || errors[r].find("peer 2") != std::string::npos;
  CHECK(named);
  CHECK(errors[0] != "");
  CHECK(errors[1] != "");
  // Each of the two hears the other's reason, also the one that failed first, whose reader must
  // go on after its own failure.
  CHECK(errors[0].find("peer 1 reports:") != std::string::npos);
  CHECK(errors[1].find("peer 0 reports:") != std::string::npos);
}

TEST_CASE("a poisoned peer's posted receive is never written; its peer hears why, both modes "
          "(poison, or a send it refuses)") {
  for (bool progress : {false, true}) {
    CAPTURE(progress);
    TcpOptions o;
    o.timeout = 3s;
    o.progress_thread = progress;
    const auto run_two = [&](const std::function<void(dpg::net::Transport&)>& body) {
      return run_tcp(2, o, [&](TcpTransport& t) { body(t); });
    };
    dpg::test::check_poison(run_two, true);
    dpg::test::check_refused_send_poisons(run_two, true);
  }
}

TEST_CASE("a peer that stops early makes the others fail at once, naming it") {
  TcpOptions o;
  o.timeout = 20s;
  auto t0 = std::chrono::steady_clock::now();
  auto errors = run_tcp(4, o, [](TcpTransport& t) {
    Communicator c(t);
    std::vector<float> v(1 << 16, 1.0f);
    c.allreduce(public_value(v));
    if (t.rank() == 1) throw dpg::Error(dpg::Code::aborted, "rank 1: stopping on purpose");
    c.allreduce(public_value(v));
  });
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  for (int r : {0, 2, 3}) {
    CAPTURE(errors[r]);
    CHECK(errors[r].find("peer 1") != std::string::npos);
  }
}

TEST_CASE("a stalled peer is named two hops away: a wait on a live peer outlasts its timeout") {
  // A chain 0 - 1 - 2 (0 is not connected to 2). Rank 0 waits on rank 1 first, so its deadline
  // passes first; rank 1 waits on rank 2, which sleeps outside any wait. Rank 0 must not give up
  // on rank 1, which is alive and waiting; rank 1 names rank 2, and rank 0 hears why.
  for (bool thread : {false, true}) {
    CAPTURE(thread);
    TcpOptions o;
    o.timeout = 1000ms;
    o.progress_thread = thread;
    auto t0 = std::chrono::steady_clock::now();
    auto errors = run_tcp(
        3, o,
        [](TcpTransport& t) {
          std::vector<std::byte> buf(64);
          const dpg::net::Tag tag{7, 1, 0};
          if (t.rank() == 0) t.wait(t.recv(1, tag, buf));
          if (t.rank() == 1) {
            std::this_thread::sleep_for(200ms);
            t.wait(t.recv(2, tag, buf));
            t.wait(t.send(0, tag, buf));
          }
          if (t.rank() == 2) std::this_thread::sleep_for(3000ms);
        },
        {}, {{1}, {0, 2}, {1}});
    CHECK(std::chrono::steady_clock::now() - t0 < 8s);
    CAPTURE(errors[0]);
    CAPTURE(errors[1]);
    if (!thread) {
      // Rank 2 ran no I/O: silent. Both messages name it as such.
      CHECK(errors[1].find("peer 2 is silent") != std::string::npos);
      CHECK(errors[0].find("peer 2 is silent") != std::string::npos);
    } else {
      // Rank 2's I/O thread kept beating, but its training thread never waited: hung or busy.
      CHECK(errors[1].find("peer 2 is alive but not waiting") != std::string::npos);
      CHECK(errors[0].find("peer 2 is alive but not waiting") != std::string::npos);
    }
  }
}

TEST_CASE("a failed send's buffer is the caller's again: what is sent after never reads it") {
  for (bool thread : {false, true}) {
    CAPTURE(thread);
    TcpOptions o;
    o.progress_thread = thread;
    for (auto how : {dpg::test::GivenBack::wait_fails, dpg::test::GivenBack::unwinds}) {
      // Unwinding takes the buffer away with no wait to hand it over: a progress thread may be
      // writing from it at that moment (a race no transport can close), so only the caller's
      // own thread runs the I/O there.
      if (how == dpg::test::GivenBack::unwinds && thread) continue;
      CAPTURE(static_cast<int>(how));
      dpg::test::check_failed_send_detached(dpg::net::local_hosts(2), o, how);
    }
  }
}

TEST_CASE("a failed wait that cancels a send in flight still hears the peer's report after it") {
  // detach_sends cancels rank 0's write in flight, and with it the reader's readiness wait,
  // which it arms again: rank 1's abort, sent while rank 0 listens for reports, must be read.
  TcpOptions o;
  o.timeout = 3000ms;  // rank 0 listens for reports for timeout / 4
  std::vector<std::byte> data(32u << 20, std::byte{0x11});
  auto errors = run_tcp(2, o, [&](TcpTransport& t) {
    const dpg::net::Tag tag{7, 1, 0};
    if (t.rank() == 0) {
      t.wait(t.send(1, tag, data));  // rank 1 does not read: times out
      return;
    }
    std::this_thread::sleep_for(3300ms);  // silent past rank 0's deadline, then fails itself
    throw dpg::Error(dpg::Code::aborted, "rank 1: stopping on purpose");
  });
  CAPTURE(errors[0]);
  CHECK(errors[0].find("timed out") != std::string::npos);
  CHECK(errors[0].find("peer 1 reports:") != std::string::npos);
}

TEST_CASE("a peer that hears an abort while it computes passes it on at once") {
  // A line 0 - 1 - 2. Rank 0 fails; rank 1's I/O thread hears it while rank 1 computes (away
  // from the transport for longer than the timeout) and so starts no more data. Rank 2, waiting
  // on rank 1, must hear the failure through rank 1 well before its own deadline, rather than
  // time out blaming rank 1 as alive but not waiting.
  TcpOptions o;
  o.timeout = 1500ms;
  o.progress_thread = true;
  std::atomic<int> posted{0};
  auto errors = run_tcp(
      3, o,
      [&posted](TcpTransport& t) {
        std::vector<float> v(4);
        const auto buf = std::as_writable_bytes(std::span(v));
        const dpg::net::Tag tag{9, 0, 0};
        if (t.rank() == 0) {
          // Once the others have posted their receives (at most 10 s): a fixed delay could end
          // before a loaded machine got them there.
          for (int i = 0; i < 1000 && posted.load() < 2; ++i) std::this_thread::sleep_for(10ms);
          throw dpg::Error(dpg::Code::internal, "rank 0: stopping on purpose");
        }
        if (t.rank() == 1) {
          const auto h = t.recv(0, tag, buf);
          ++posted;
          std::this_thread::sleep_for(2500ms);  // computing
          t.wait(h);
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        const auto h = t.recv(1, tag, buf);
        ++posted;
        try {
          t.wait(h);
        } catch (const dpg::Error& e) {
          CHECK(e.code() == dpg::Code::aborted);
          CHECK(std::chrono::steady_clock::now() - start < 1000ms);
          throw;
        }
      },
      {}, {{1}, {0, 2}, {1}});
  CAPTURE(errors[2]);
  CHECK(errors[2].find("peer 1 aborted: rank 1: peer 0 aborted: rank 0: stopped on an error of "
                       "its own") != std::string::npos);
  CHECK(errors[2].find("timed out") == std::string::npos);
}

TEST_CASE("TCP: receives match by tag, early messages are queued, B before A; both modes") {
  for (bool thread : {false, true}) {
    CAPTURE(thread);
    TcpOptions o;
    o.timeout = 5s;
    o.progress_thread = thread;
    o.early = dpg::test::kSmallEarly;
    auto errors = run_tcp(2, o, [](TcpTransport& t) { dpg::test::out_of_order(t); });
    for (auto& e : errors) CHECK_MESSAGE(e == "", e);
  }
}

TEST_CASE("TCP: a message past the early queue's bound holds back the later one, named") {
  TcpOptions o;
  o.timeout = 5s;
  o.early = dpg::test::kSmallEarly;
  auto ok = run_tcp(2, o, [](TcpTransport& t) { dpg::test::held_past_bound(t, false); });
  for (auto& e : ok) CHECK_MESSAGE(e == "", e);
  o.timeout = 1s;
  auto errors = run_tcp(2, o, [](TcpTransport& t) { dpg::test::held_past_bound(t, true); });
  dpg::test::check_held(errors);
}

TEST_CASE("TCP: an early message of another size than its receive is data_loss") {
  TcpOptions o;
  o.timeout = 5s;
  o.early = dpg::test::kSmallEarly;
  auto errors = run_tcp(2, o, [](TcpTransport& t) { dpg::test::early_size_mismatch(t); });
  dpg::test::check_mismatch(errors);
}
