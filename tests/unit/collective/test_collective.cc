// Collectives over the in-process transport: closed forms, odd sizes, tiny segments, and the
// result being bitwise identical on every peer.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "runtime/collective/communicator.h"
#include "runtime/collective/device_collectives.h"
#include "runtime/core/error.h"
#include "runtime/net/inproc/inproc_transport.h"
#include "runtime/net/routed_transport.h"
#include "runtime/net/subset_transport.h"
#include "tests/unit/collective/world.h"
#include "tests/unit/net/matching_check.h"
#include "tests/unit/net/poison_check.h"

using dpg::public_value;  // the tests' buffers are synthetic

using dpg::collective::Communicator;
using dpg::collective::Options;
using dpg::collective::Reduce;

namespace {

using dpg::test::run_world;

// All-reduces rank + (i mod 7) on n peers (with `then_average`, averages the sum once more: exact
// when n is a power of two) and checks every rank against the closed form.
void check_rank_sum(int n, std::size_t count, Options options, bool then_average = false) {
  std::vector<std::vector<float>> out(n);
  run_world(n, options, [&](Communicator& c) {
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = float(c.rank()) + float(i % 7);
    c.allreduce(public_value(v), Reduce::sum);
    if (then_average) c.allreduce(public_value(v), Reduce::average);  // a fresh round
    out[c.rank()] = v;
  });
  for (int r = 0; r < n; ++r) {
    REQUIRE(out[r].size() == count);
    for (std::size_t i = 0; i < count; ++i) {
      REQUIRE(out[r][i] == float(n * (n - 1) / 2 + n * int(i % 7)));
    }
  }
}

}  // namespace

TEST_CASE("ring all-reduce of rank-valued inputs sums to the closed form, any size and segment") {
  for (int n : {1, 2, 3, 4, 5, 7}) {
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t(n - 1),
                              std::size_t(n + 1), std::size_t{1000}, std::size_t{100003}}) {
      for (std::size_t seg : {std::size_t{4}, std::size_t{12}, std::size_t{256 * 1024}}) {
       for (std::size_t small : {std::size_t{0}, std::size_t{64 * 1024}}) {
        for (std::size_t slots : {std::size_t{1}, std::size_t{3}}) {
        if (count > 2000 && seg < 100) continue;  // tens of thousands of messages: no new path
        CAPTURE(n);
        CAPTURE(count);
        CAPTURE(seg);
        CAPTURE(small);
        CAPTURE(slots);
        check_rank_sum(n, count, Options{seg, small, slots, 0});  // medium_bytes 0: the ring
        }
       }
      }
    }
  }
}

TEST_CASE("halving-doubling all-reduce sums to the closed form on 1, 2, 4 and 8 peers") {
  for (int n : {1, 2, 4, 8}) {
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t(n + 1),
                              std::size_t{1000}, std::size_t{100003}}) {
      CAPTURE(n);
      CAPTURE(count);
      check_rank_sum(n, count, Options{.small_bytes = 0, .medium_bytes = std::size_t{1} << 30},
                     true);
    }
  }
}

TEST_CASE("all-reduce average of random floats is bitwise identical on every peer") {
  for (bool halving : {false, true}) {
  for (int n : {2, 3, 4, 6, 8}) {
    if (halving && (n & (n - 1)) != 0) continue;
    CAPTURE(halving);
    std::vector<std::vector<double>> in(n), out(n);
    std::mt19937 gen(n);
    std::normal_distribution<double> normal;
    for (auto& v : in) {
      v.resize(4099);
      for (auto& x : v) x = normal(gen);
    }
    const Options o = halving ? Options{.small_bytes = 0, .medium_bytes = std::size_t{1} << 30}
                              : Options{.segment_bytes = 64, .medium_bytes = 0};
    run_world(n, o, [&](Communicator& c) {
      auto v = in[c.rank()];
      c.allreduce(public_value(v), Reduce::average);
      out[c.rank()] = v;
    });
    for (std::size_t i = 0; i < out[0].size(); ++i) {
      double mean = 0;
      for (int r = 0; r < n; ++r) mean += in[r][i];
      mean /= n;
      REQUIRE(out[0][i] == doctest::Approx(mean).epsilon(1e-12));
    }
    for (int r = 1; r < n; ++r) {
      REQUIRE(std::memcmp(out[r].data(), out[0].data(), out[0].size() * sizeof(double)) == 0);
    }
  }
  }
}

TEST_CASE("integer all-reduce sums modulo 2^32, exactly, on every path and every peer") {
  // Options choosing each path. Defaults: recursive doubling up to 32 KiB on a power-of-two world
  // (counts up to 8192), halving-doubling up to 1 MiB (100003), the ring above (300000) and on
  // any other world. Then each path forced for every size: doubling alone, halving-doubling alone
  // (odd segment size), the ring alone with many segments and one scratch slot.
  const Options paths[] = {
      Options{},
      Options{.small_bytes = std::size_t{1} << 30},
      Options{.segment_bytes = 1000, .small_bytes = 0, .medium_bytes = std::size_t{1} << 30},
      Options{.segment_bytes = 4092, .small_bytes = 0, .scratch_slots = 1, .medium_bytes = 0},
  };
  for (const Options& o : paths) {
    for (int n : {1, 2, 3, 4, 5, 8}) {
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001},
                                std::size_t{100003}, std::size_t{300000}}) {
        CAPTURE(o.small_bytes);
        CAPTURE(o.medium_bytes);
        CAPTURE(n);
        CAPTURE(count);
        // Values within 2^20 of 2^32, so that the sum wraps past 2^32 (n - 1 times, nearly), and a
        // few anywhere in [0, 2^32).
        std::mt19937 gen(static_cast<unsigned>(n * 1000003 + count));
        std::vector<std::vector<std::uint32_t>> in(n, std::vector<std::uint32_t>(count));
        for (auto& v : in) {
          for (std::size_t i = 0; i < count; ++i) {
            v[i] = i % 97 == 3 ? static_cast<std::uint32_t>(gen()) : 0xffffffffu - (gen() & 0xfffff);
          }
        }
        std::vector<std::uint32_t> want(count);
        for (std::size_t i = 0; i < count; ++i) {
          std::uint64_t sum = 0;  // no wrap here: n < 2^32 terms below 2^32
          for (int r = 0; r < n; ++r) sum += in[r][i];
          want[i] = static_cast<std::uint32_t>(sum & 0xffffffffu);
        }
        std::vector<std::vector<std::uint32_t>> out(n);
        std::vector<float> after(n);
        run_world(n, o, [&](Communicator& c) {
          auto v = in[c.rank()];
          c.allreduce(public_value(std::span<std::uint32_t>(v)));
          out[c.rank()] = std::move(v);
          // The communicator goes on to a float all-reduce in the next round.
          float x = 1.0f;
          c.allreduce(public_value(std::span<float>(&x, 1)));
          after[c.rank()] = x;
        });
        for (int r = 0; r < n; ++r) {
          CAPTURE(r);
          REQUIRE(out[r].size() == count);
          REQUIRE(out[r] == want);
          REQUIRE(after[r] == float(n));
        }
      }
    }
  }
}

TEST_CASE("broadcast, all-gather and barrier, with repeated calls in one communicator") {
  for (int n : {1, 2, 3, 5}) {
    for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{1001}}) {
      CAPTURE(n);
      CAPTURE(size);
      run_world(n, Options{.segment_bytes = 7}, [&](Communicator& c) {
        for (int root = 0; root < n; ++root) {
          std::vector<std::byte> b(size, std::byte(c.rank() == root ? 0 : 0xff));
          for (std::size_t i = 0; c.rank() == root && i < size; ++i) b[i] = std::byte(i * 7 + root);
          c.broadcast(public_value(b), root);
          for (std::size_t i = 0; i < size; ++i) REQUIRE(b[i] == std::byte(i * 7 + root));
        }
        std::vector<std::byte> mine(size, std::byte(c.rank() + 1)), all(size * n);
        c.allgather(public_value(mine), all);
        for (int r = 0; r < n; ++r) {
          for (std::size_t i = 0; i < size; ++i) REQUIRE(all[r * size + i] == std::byte(r + 1));
        }
        c.barrier();
      });
    }
  }
}

TEST_CASE("in process: a poisoned peer's posted receive is never written, its wait throws "
          "(poison, or a send it refuses)") {
  const auto run_two = [](const std::function<void(dpg::net::Transport&)>& body) {
    return dpg::test::run_transports_errors(2, std::chrono::seconds(1),
                                            [&](int, dpg::net::Transport& t) { body(t); });
  };
  dpg::test::check_poison(run_two, false);
  dpg::test::check_refused_send_poisons(run_two, false);
}

// Rank 0 reaches peer 1 over fabric A and peer 2 over fabric B (a subset of all three ranks
// serves as an owning handle on a fabric's transport). It posts a receive from peer 2 (on B),
// then `give_up` fails its routed transport, by a throw that is recorded; only then does peer 2
// send. What each step threw, and how many of the receive's 1000 bytes are still untouched.
namespace {
struct RoutedGivenUp {
  std::string given_up, wait_error, sender_error;
  std::ptrdiff_t untouched = 0;
};
RoutedGivenUp routed_given_up(const std::function<void(dpg::net::Transport&)>& give_up) {
  dpg::net::InprocFabric a(3, std::chrono::milliseconds(500)), b(3, std::chrono::milliseconds(500));
  std::vector<std::byte> into(1000, std::byte{0x11});
  RoutedGivenUp out;
  {
    dpg::net::RoutedTransport t(
        std::make_unique<dpg::net::SubsetTransport>(a.peer(0), std::vector<int>{0, 1, 2}),
        std::make_unique<dpg::net::SubsetTransport>(b.peer(0), std::vector<int>{0, 1, 2}),
        {0, 0, 1});
    const dpg::net::Handle from2 = t.recv(2, {9, 1, 0}, into);
    try {
      give_up(t);
    } catch (const dpg::Error& e) {
      out.given_up = e.what();
    }
    const std::vector<std::byte> sent(1000, std::byte{0x55});
    try {
      b.peer(2).wait(b.peer(2).send(0, {9, 1, 0}, sent));
    } catch (const dpg::Error& e) {
      out.sender_error = e.what();
    }
    try {
      t.wait(from2);
    } catch (const dpg::Error& e) {
      out.wait_error = e.what();
    }
  }
  out.untouched = std::count(into.begin(), into.end(), std::byte{0x11});
  return out;
}
}  // namespace

TEST_CASE("routed: a wait that fails on one part poisons the other; its receive is never written") {
  // Rank 0's wait on peer 1 (part A), who sends nothing, times out.
  const auto r = routed_given_up([](dpg::net::Transport& t) {
    std::vector<std::byte> none(4);
    t.wait(t.recv(1, {9, 2, 0}, none));
  });
  CAPTURE(r.given_up);
  CAPTURE(r.wait_error);
  CAPTURE(r.sender_error);
  CHECK(r.given_up.find("timed out") != std::string::npos);
  CHECK(r.untouched == 1000);
  CHECK(r.wait_error.find("timed out") != std::string::npos);  // the first failure, rethrown
  CHECK(!r.sender_error.empty());                              // nobody took its message
}

TEST_CASE("routed: a send it refuses poisons both parts; a receive posted before is never written") {
  const auto r = routed_given_up([](dpg::net::Transport& t) {
    const std::vector<std::byte> small(4);
    t.send(5, {9, 2, 0}, small);  // no rank 5
  });
  CAPTURE(r.given_up);
  CAPTURE(r.wait_error);
  CHECK(r.given_up.find("peer 5: this peer has no connection to it") != std::string::npos);
  CHECK(r.untouched == 1000);
  CHECK(r.wait_error.find("peer 5: this peer has no connection to it") != std::string::npos);
}

TEST_CASE("a size mismatch between peers is an error naming the peer, not a hang") {
  CHECK_THROWS_WITH_AS(run_world(2, Options{.segment_bytes = 1024},
                                 [&](Communicator& c) {
                                   std::vector<float> v(c.rank() == 0 ? 10 : 12);
                                   c.allreduce(public_value(v));
                                 }),
                       doctest::Contains("peer"), dpg::Error);
}

TEST_CASE("a routed communicator sends its float all-reduces down the route, the rest as before") {
  run_world(3, Options{}, [&](Communicator& c) {
    int calls = 0;
    Reduce seen = Reduce::sum;
    // A route that reduces through the transport's double path, so the result is still the sum.
    c.route_float_allreduce([&](std::span<float> data, Reduce op) {
      ++calls;
      seen = op;
      std::vector<double> d(data.begin(), data.end());
      c.allreduce(public_value(std::span<double>(d)), op);
      std::copy(d.begin(), d.end(), data.begin());
    });
    std::vector<float> f(10, static_cast<float>(c.rank() + 1));
    c.allreduce(public_value(std::span<float>(f)), Reduce::average);
    CHECK(calls == 1);
    CHECK(seen == Reduce::average);
    for (float v : f) CHECK(v == 2.0f);
    std::vector<double> d(4, 1.0);
    c.allreduce(public_value(std::span<double>(d)));  // not routed
    CHECK(calls == 1);
    for (double v : d) CHECK(v == 3.0);
    c.route_float_allreduce({});
    c.allreduce(public_value(std::span<float>(f)));
    CHECK(calls == 1);
    for (float v : f) CHECK(v == 6.0f);
  });
}

TEST_CASE("host-memory device collectives: start_exchange returns before the peer has begun") {
  std::atomic<bool> started{false};
  run_world(2, Options{}, [&](Communicator& c) {
    dpg::collective::HostMemoryCollectives d(c);
    const int me = c.rank(), other = 1 - me;
    std::vector<float> out(1000, static_cast<float>(me + 1)), in(1000, 0.0f);
    const std::vector<dpg::collective::DeviceSend> sends = {{other, out.data(), out.size()}};
    const std::vector<dpg::collective::DeviceRecv> recvs = {{other, in.data(), in.size()}};
    if (me == 0) {
      d.start_exchange(sends, recvs);  // rank 1 has not started: this must not wait for it
      started = true;
    } else {
      // Rank 1 starts only once rank 0's start has returned (within 10 s).
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!started && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      REQUIRE(started);
      d.start_exchange(sends, recvs);
    }
    d.finish_exchange();
    for (float v : in) CHECK(v == static_cast<float>(other + 1));
    // An all-reduce finishes an exchange in flight first.
    std::fill(in.begin(), in.end(), 0.0f);
    d.start_exchange(sends, recvs);
    CHECK(d.in_flight());
    float one = 1.0f;
    d.allreduce(&one, 1);
    CHECK_FALSE(d.in_flight());
    CHECK(one == 2.0f);
    for (float v : in) CHECK(v == static_cast<float>(other + 1));
  });
}

TEST_CASE("host-memory device collectives: destroyed with an exchange in flight, they wait for it") {
  // Else the peer's late message would land in a receive buffer freed with them. Rank 1 sends
  // 200 ms after rank 0 has started, so rank 0's destruction must take at least that long.
  std::atomic<bool> started{false};
  run_world(2, Options{}, [&](Communicator& c) {
    const int me = c.rank(), other = 1 - me;
    std::vector<float> out(1000, static_cast<float>(me + 1));
    if (me == 0) {
      const auto begin = std::chrono::steady_clock::now();
      {
        std::vector<float> in(1000, 0.0f);
        dpg::collective::HostMemoryCollectives d(c);
        const std::vector<dpg::collective::DeviceSend> sends = {{other, out.data(), out.size()}};
        const std::vector<dpg::collective::DeviceRecv> recvs = {{other, in.data(), in.size()}};
        d.start_exchange(sends, recvs);
        started = true;
      }
      CHECK(std::chrono::steady_clock::now() - begin >= std::chrono::milliseconds(150));
    } else {
      std::vector<float> in(1000, 0.0f);
      dpg::collective::HostMemoryCollectives d(c);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!started && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      REQUIRE(started);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const std::vector<dpg::collective::DeviceSend> sends = {{other, out.data(), out.size()}};
      const std::vector<dpg::collective::DeviceRecv> recvs = {{other, in.data(), in.size()}};
      d.exchange(sends, recvs);
      for (float v : in) CHECK(v == 1.0f);
    }
  });
}

TEST_CASE("host-memory device collectives: exchange in order per pair, to itself too, and the sum") {
  run_world(3, Options{}, [&](Communicator& c) {
    dpg::collective::HostMemoryCollectives d(c);
    const int me = c.rank(), next = (me + 1) % 3, prev = (me + 2) % 3;
    // Two buffers to the next rank (their order between the pair is kept), one to itself; three
    // exchanges in a row, so that the calls' numbering keeps them apart.
    for (int call = 0; call < 3; ++call) {
      std::vector<float> a(5, static_cast<float>(100 * me + call)), b(3, static_cast<float>(-me)),
          self(4, 7.0f + static_cast<float>(me));
      std::vector<float> ra(5), rb(3), rself(4);
      const std::vector<dpg::collective::DeviceSend> sends = {
          {next, a.data(), a.size()}, {next, b.data(), b.size()}, {me, self.data(), self.size()}};
      const std::vector<dpg::collective::DeviceRecv> recvs = {
          {me, rself.data(), rself.size()}, {prev, ra.data(), ra.size()}, {prev, rb.data(), rb.size()}};
      d.exchange(sends, recvs);
      for (float v : ra) CHECK(v == static_cast<float>(100 * prev + call));
      for (float v : rb) CHECK(v == static_cast<float>(-prev));
      CHECK(rself == self);
    }
    std::vector<float> v(6, static_cast<float>(me + 1));
    d.allreduce(v.data(), v.size(), Reduce::sum);
    for (float x : v) CHECK(x == 6.0f);
    const std::vector<dpg::collective::DeviceSend> bad = {{5, v.data(), v.size()}};
    CHECK_THROWS_WITH_AS(d.exchange(bad, {}), doctest::Contains("send peer 5 in a world of 3"),
                         dpg::Error);
  });
}

namespace {
// Runs each rank's body on its thread over an in-process fabric of two with the small early
// queue; returns each rank's error ("" when it passed).
std::vector<std::string> run_matching(const std::function<void(dpg::net::Transport&)>& body) {
  dpg::net::InprocFabric fabric(2, std::chrono::milliseconds(1000), dpg::test::kSmallEarly);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(fabric.peer(r));
      } catch (const dpg::Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}
}  // namespace

TEST_CASE("in process: receives match by tag, early messages are queued, B before A") {
  auto errors = run_matching(dpg::test::out_of_order);
  for (auto& e : errors) CHECK_MESSAGE(e == "", e);
}

TEST_CASE("in process: a message past the early queue's bound holds back the later one, named") {
  auto ok = run_matching([](dpg::net::Transport& t) { dpg::test::held_past_bound(t, false); });
  for (auto& e : ok) CHECK_MESSAGE(e == "", e);
  auto errors = run_matching([](dpg::net::Transport& t) { dpg::test::held_past_bound(t, true); });
  dpg::test::check_held(errors);
}

TEST_CASE("in process: an early message of another size than its receive is data_loss") {
  auto errors = run_matching(dpg::test::early_size_mismatch);
  dpg::test::check_mismatch(errors);
}
