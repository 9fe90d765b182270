// Matching by (peer, tag) and the early queue, the same on every transport (transport.h): each
// function is one rank's part in a world of two, rank 0 sending and rank 1 receiving; run them
// with the transport's EarlyLimits set to kSmallEarly. They throw on a wrong result.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/net/transport.h"

namespace dpg::test {

inline constexpr net::EarlyLimits kSmallEarly{4096, 4};
inline constexpr uint32_t kMatchOp = 9;

inline std::vector<std::byte> pattern(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<unsigned>(i * 7 + seed));
  return v;
}

inline void expect_pattern(const std::vector<std::byte>& v, int seed, const char* what) {
  if (v != pattern(v.size(), seed)) {
    throw Error(Code::internal, std::string(what) + ": wrong bytes received");
  }
}

// Rank 1 receives A and B after both have arrived, B first; then a message whose receive was
// posted before it was sent (the zero-copy path). Rank 1's reply tells rank 0 it is done.
inline void out_of_order(net::Transport& t) {
  using namespace std::chrono_literals;
  std::vector<std::byte> ack(1);
  if (t.rank() == 0) {
    auto a = pattern(100, 1), b = pattern(200, 2), c = pattern(3000, 3);
    const auto ha = t.send(1, {kMatchOp, 0, 1}, a);
    const auto hb = t.send(1, {kMatchOp, 0, 2}, b);
    t.wait(ha);
    t.wait(hb);
    t.wait(t.recv(1, {kMatchOp, 0, 9}, ack));  // rank 1 has posted its receive of c
    t.wait(t.send(1, {kMatchOp, 0, 3}, c));
    t.wait(t.recv(1, {kMatchOp, 0, 10}, ack));
    return;
  }
  std::this_thread::sleep_for(100ms);  // A and B arrive before their receives
  std::vector<std::byte> a(100), b(200), c(3000);
  t.wait(t.recv(0, {kMatchOp, 0, 2}, b));
  expect_pattern(b, 2, "B");
  t.wait(t.recv(0, {kMatchOp, 0, 1}, a));
  expect_pattern(a, 1, "A");
  const auto hc = t.recv(0, {kMatchOp, 0, 3}, c);
  t.wait(t.send(0, {kMatchOp, 0, 9}, ack));
  t.wait(hc);
  expect_pattern(c, 3, "C");
  t.wait(t.send(0, {kMatchOp, 0, 10}, ack));
}

// A message larger than the bound is not queued: it waits for its receive and holds back the
// later one, so rank 1's wait on the later one times out naming peer 0 and the held tag
// (`deadlock` true); posted in order, both arrive (`deadlock` false).
inline void held_past_bound(net::Transport& t, bool deadlock) {
  using namespace std::chrono_literals;
  const std::size_t big = 2 * kSmallEarly.bytes;
  if (t.rank() == 0) {
    auto a = pattern(big, 4), b = pattern(16, 5);
    std::vector<std::byte> ack(1);
    const auto ha = t.send(1, {kMatchOp, 1, 1}, a);
    const auto hb = t.send(1, {kMatchOp, 1, 2}, b);
    const auto hack = t.recv(1, {kMatchOp, 1, 9}, ack);
    t.wait(hack);
    t.wait(ha);
    t.wait(hb);
    return;
  }
  std::this_thread::sleep_for(100ms);
  std::vector<std::byte> a(big), b(16), ack(1);
  if (deadlock) {
    t.wait(t.recv(0, {kMatchOp, 1, 2}, b));  // throws: the big one holds it back
    throw Error(Code::internal, "the later message passed a held one");
  }
  t.wait(t.recv(0, {kMatchOp, 1, 1}, a));
  expect_pattern(a, 4, "big");
  t.wait(t.recv(0, {kMatchOp, 1, 2}, b));
  expect_pattern(b, 5, "small");
  t.wait(t.send(0, {kMatchOp, 1, 9}, ack));
}

// An early message whose receive expects another size: data_loss naming both sizes.
inline void early_size_mismatch(net::Transport& t) {
  using namespace std::chrono_literals;
  if (t.rank() == 0) {
    auto a = pattern(100, 6);
    std::vector<std::byte> ack(1);
    t.wait(t.send(1, {kMatchOp, 2, 1}, a));
    t.wait(t.recv(1, {kMatchOp, 2, 9}, ack));  // fails: rank 1 gives up
    return;
  }
  std::this_thread::sleep_for(100ms);
  std::vector<std::byte> a(50);
  t.wait(t.recv(0, {kMatchOp, 2, 1}, a));
}

// The errors of held_past_bound(t, true) and early_size_mismatch(t) on ranks 0 and 1.
inline void check_held(const std::vector<std::string>& errors) {
  CAPTURE(errors[1]);
  CHECK(errors[1].find("rank 1: receive from peer 0 (op 9 round 1 chunk 2") != std::string::npos);
  CHECK(errors[1].find("peer 0's next message (op 9 round 1 chunk 1, 8192 bytes)") !=
        std::string::npos);
  CHECK(errors[1].find("timed out after") != std::string::npos);
}
inline void check_mismatch(const std::vector<std::string>& errors) {
  CAPTURE(errors[1]);
  CHECK(errors[1].find("peer 0 sent 100 bytes for op 9 round 2 chunk 1 but the receive expects 50") !=
        std::string::npos);
}

}  // namespace dpg::test
