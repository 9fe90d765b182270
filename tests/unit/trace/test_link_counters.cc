// LinkCounters filled by a TracingTransport (runtime/net/link_counters.h): each peer's bytes both
// ways, the training thread's blocked time and whom it waits on, and the step's time in flight,
// which a service thread's messages stay out of.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <optional>
#include <thread>
#include <vector>

#include "runtime/core/trace.h"
#include "runtime/net/inproc/inproc_transport.h"
#include "runtime/net/link_counters.h"
#include "runtime/net/tracing_transport.h"

using dpg::net::InprocFabric;
using dpg::net::LinkCounters;
using dpg::net::OffStepThread;
using dpg::net::Tag;
using dpg::net::TracingTransport;
using namespace std::chrono_literals;

namespace {

int64_t ms(int64_t ns) { return ns / 1000000; }

}  // namespace

TEST_CASE("LinkCounters: bytes per peer, the training thread's wait, and in-flight time") {
  InprocFabric fabric(2);
  dpg::trace::Tracer off[2];  // never opened: counting works untraced
  std::optional<LinkCounters> counters[2];
  std::atomic<bool> built[2] = {false, false};
  std::atomic<int> seen_waiting_on{-2};
  std::atomic<int64_t> seen_waiting_ns{0};
  LinkCounters::Snapshot before_off[2], after_off[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      counters[r].emplace(2);  // this thread is its training thread
      built[r] = true;
      TracingTransport t(fabric.peer(r), off[r], &*counters[r]);
      std::vector<std::byte> big(1000), small(64);
      for (int i = 0; i < 3; ++i) {  // 1000 bytes 0 -> 1, 64 bytes 1 -> 0, three times
        if (r == 0) {
          const auto s = t.send(1, Tag{3, static_cast<uint64_t>(i), 0}, big);
          const auto v = t.recv(1, Tag{3, static_cast<uint64_t>(i), 1}, small);
          t.wait(s);
          t.wait(v);
        } else {
          t.wait(t.recv(0, Tag{3, static_cast<uint64_t>(i), 0}, big));
          t.wait(t.send(0, Tag{3, static_cast<uint64_t>(i), 1}, small));
        }
      }
      // Rank 0's training thread waits 300 ms on rank 1's late message.
      if (r == 0) {
        t.wait(t.recv(1, Tag{4, 0, 0}, small));
      } else {
        std::this_thread::sleep_for(300ms);
        t.wait(t.send(0, Tag{4, 0, 0}, small));
      }
      // Then a service thread of rank 1 waits 300 ms for rank 0: bytes, but neither blocked
      // (not the training thread) nor in flight (an OffStepThread).
      before_off[r] = counters[r]->snapshot();
      if (r == 0) {
        std::this_thread::sleep_for(300ms);
        t.wait(t.send(1, Tag{5, 0, 0}, big));
      } else {
        std::thread service([&] {
          const OffStepThread mark;
          t.wait(t.recv(0, Tag{5, 0, 0}, big));
        });
        service.join();
      }
      after_off[r] = counters[r]->snapshot();
    });
  }
  // While rank 0 waits on rank 1, its counters say so.
  while (!built[0]) std::this_thread::sleep_for(1ms);
  for (int i = 0; i < 2000 && seen_waiting_on < 0; ++i) {
    const auto s = counters[0]->snapshot();
    if (s.waiting_on == 1 && s.waiting_ns > 100 * 1000000LL) {
      seen_waiting_on = s.waiting_on;
      seen_waiting_ns = s.waiting_ns;
    }
    std::this_thread::sleep_for(1ms);
  }
  for (auto& th : threads) th.join();
  CHECK(seen_waiting_on == 1);
  CHECK(ms(seen_waiting_ns) >= 100);

  const auto a = counters[0]->snapshot(), b = counters[1]->snapshot();
  CHECK(a.sent[1] == 3 * 1000 + 1000);
  CHECK(a.received[1] == 3 * 64 + 64);
  CHECK(b.received[0] == a.sent[1]);  // each side's count of one link agrees
  CHECK(b.sent[0] == a.received[1]);
  CHECK(a.sent[0] == 0);
  CHECK(a.waiting_on == -1);
  // Rank 0's late receive: blocked and in flight for about 300 ms (a 300 ms sleep, at least 250).
  CHECK(ms(a.blocked_ns) >= 250);
  CHECK(ms(before_off[0].in_flight_ns) >= 250);
  // Rank 1's service thread waited about 300 ms: counted in its bytes only.
  CHECK(after_off[1].received[0] == before_off[1].received[0] + 1000);
  CHECK(ms(after_off[1].blocked_ns - before_off[1].blocked_ns) < 100);
  CHECK(ms(after_off[1].in_flight_ns - before_off[1].in_flight_ns) < 100);
}
