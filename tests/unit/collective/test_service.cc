// The message service (runtime/collective/service.h) over the in-process transport: requests
// answered out of order, a handler's failure naming its culprit to every waiter once, a drain,
// and a dead server.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/collective/service.h"
#include "runtime/core/error.h"
#include "runtime/net/inproc/inproc_transport.h"

using namespace std::chrono_literals;
using dpg::collective::Blame;
using dpg::collective::Service;
using dpg::collective::ServiceOp;

namespace {

constexpr uint32_t kOp = 9;

std::vector<std::string> run(int n, std::chrono::milliseconds timeout,
                             const std::function<void(dpg::net::Transport&)>& body) {
  dpg::net::InprocFabric fabric(n, timeout);
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(fabric.peer(r));
      } catch (const dpg::Error& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Op 0: a double in, the double times the client's rank plus the round out.
const std::vector<ServiceOp> kOps{{sizeof(double), sizeof(double)}, {0, 0, true}};

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("service: requests answered out of order, by peer, op and round") {
  std::atomic<bool> second_done{false};
  auto errors = run(3, 5s, [&](dpg::net::Transport& t) {
    Service s(t, kOp, "test", kOps);
    if (t.rank() == 0) {
      s.serve({1, 2}, 0, [&](const Service::Request& r, dpg::Wire<const std::byte> in,
                             Service::Reply& out) {
        if (r.op == 1) return;
        // Peer 1's first request waits until peer 2's has been answered.
        if (r.peer == 1 && r.seq == 0) {
          while (!second_done.load()) std::this_thread::sleep_for(1ms);
        }
        double x = in.as<double>().values()[0];
        x = x * r.peer + static_cast<double>(r.round);
        out.put(0, dpg::public_value(std::span<const double>(&x, 1)).bytes());
      });
      s.drain(2);
      s.join();
      return;
    }
    for (uint64_t round = 0; round < 2; ++round) {
      const double x = 10.0;
      double y = 0;
      const int ticket = s.call(0, 0, 100 + round, dpg::public_value(std::span<const double>(&x, 1)).bytes(),
                                std::as_writable_bytes(std::span(&y, 1)));
      s.wait(ticket);
      if (y != 10.0 * t.rank() + 100 + static_cast<double>(round)) {
        throw dpg::Error(dpg::Code::internal, "wrong reply " + std::to_string(y));
      }
      if (t.rank() == 2) second_done = true;
    }
    s.finish({0});
  });
  for (auto& e : errors) CHECK_MESSAGE(e == "", e);
}

TEST_CASE("service: a handler's failure names its culprit to every waiter, once") {
  auto errors = run(3, 3s, [&](dpg::net::Transport& t) {
    Service s(t, kOp, "test", kOps);
    if (t.rank() == 0) {
      s.serve({1, 2}, 0, [&](const Service::Request& r, dpg::Wire<const std::byte>,
                             Service::Reply&) {
        if (r.peer == 1) {
          throw Blame(2, dpg::Code::deadline_exceeded,
                      "rank 0: test: held peer 1's request waiting for peer 2");
        }
        std::this_thread::sleep_for(2s);  // peer 2 is slow
      });
      s.drain(1);  // throws the first failure
      return;
    }
    const double x = 1.0;
    double y = 0;
    s.wait(s.call(0, 0, 0, dpg::public_value(std::span<const double>(&x, 1)).bytes(), std::as_writable_bytes(std::span(&y, 1))));
    if (t.rank() == 1 && s.culprit() != 2) throw dpg::Error(dpg::Code::internal, "wrong culprit");
  });
  CAPTURE(errors[0]);
  CAPTURE(errors[1]);
  CHECK(errors[0] == "rank 0: test: held peer 1's request waiting for peer 2");
  CHECK(errors[1] == errors[0]);  // the same first failure, told once
  CHECK(count(errors[1], "peer 2") == 1);
}

TEST_CASE("service: a drain returns once every client's requests are answered") {
  std::atomic<int> handled{0};
  auto errors = run(3, 5s, [&](dpg::net::Transport& t) {
    Service s(t, kOp, "test", kOps);
    if (t.rank() == 0) {
      s.serve({1, 2}, 5, [&](const Service::Request& r, dpg::Wire<const std::byte>,
                             Service::Reply&) {
        if (r.op == 0) {
          std::this_thread::sleep_for(20ms);
          ++handled;
        }
      });
      s.drain(8);  // requests 5, 6, 7 of both
      if (handled.load() != 6 || s.answered(1) != 8 || s.answered(2) != 8) {
        throw dpg::Error(dpg::Code::internal, "drained early: " + std::to_string(handled.load()));
      }
      s.join();
      return;
    }
    s.number_from(5);  // a resumed run: both sides number from the boundary
    for (uint64_t round = 5; round < 8; ++round) {
      const double x = 0;
      double y = 0;
      s.wait(s.call(0, 0, round, dpg::public_value(std::span<const double>(&x, 1)).bytes(),
                    std::as_writable_bytes(std::span(&y, 1))));
    }
    s.finish({0});
  });
  for (auto& e : errors) CHECK_MESSAGE(e == "", e);
}

TEST_CASE("service: a dead server fails its client within the timeout, naming it") {
  const auto start = std::chrono::steady_clock::now();
  auto errors = run(2, 1s, [&](dpg::net::Transport& t) {
    Service s(t, kOp, "test", kOps);
    if (t.rank() == 0) return;  // never serves
    const double x = 0;
    double y = 0;
    s.wait(s.call(0, 0, 0, dpg::public_value(std::span<const double>(&x, 1)).bytes(), std::as_writable_bytes(std::span(&y, 1))));
  });
  const auto took = std::chrono::steady_clock::now() - start;
  CAPTURE(errors[1]);
  CHECK(errors[1].find("rank 1: receive from peer 0 (op 9 round 0 chunk 2") != std::string::npos);
  CHECK(errors[1].find("timed out after") != std::string::npos);
  CHECK(took < 3s);
}
