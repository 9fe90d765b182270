#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/trace.h"
#include "runtime/net/inproc/inproc_transport.h"
#include "runtime/net/tracing_transport.h"
#include "tests/unit/trace/trace_test_util.h"

using dpg::net::Handle;
using dpg::net::InprocFabric;
using dpg::net::Tag;
using dpg::net::TracingTransport;
using dpg::trace::Tracer;
using dpg::trace::testing::parse_file;
using dpg::trace::testing::TempDir;
using nlohmann::json;

namespace {

std::vector<json> spans(const json& events, const std::string& name) {
  std::vector<json> out;
  for (const auto& e : events)
    if (e.at("name") == name && e.at("ph") == "X") out.push_back(e);
  return out;
}

// Rank 0 sends 1000 bytes to rank 1 under (op 3, round 5, chunk 1), rank 1 answers with 64 bytes
// under (op 3, round 5, chunk 2); `rounds` times, step by step.
void exchange(TracingTransport& t, int rounds) {
  std::vector<std::byte> big(1000), small(64);
  for (int i = 0; i < rounds; ++i) {
    if (t.rank() == 0) {
      const Handle s = t.send(1, Tag{3, 5, 1}, big);
      const Handle r = t.recv(1, Tag{3, 5, 2}, small);
      t.wait(s);
      t.wait(r);
    } else {
      const Handle r = t.recv(0, Tag{3, 5, 1}, big);
      t.wait(r);
      const Handle s = t.send(0, Tag{3, 5, 2}, small);
      t.wait(s);
    }
  }
}

}  // namespace

TEST_CASE("TracingTransport records send, recv and wait spans with peer, bytes and tag") {
  TempDir dir;
  InprocFabric fabric(2);
  Tracer tracers[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Tracer& tracer = tracers[r];
      tracer.open(dir.file("rank" + std::to_string(r) + ".json"), r, "rank " + std::to_string(r));
      TracingTransport t(fabric.peer(r), tracer);
      CHECK(t.rank() == r);
      CHECK(t.world() == 2);
      for (int step = 0; step < 3; ++step) {
        tracer.set_step(step);
        exchange(t, 1);
      }
      tracer.close();
    });
  for (auto& t : threads) t.join();

  for (int r = 0; r < 2; ++r) {
    const json events = parse_file(dir.file("rank" + std::to_string(r) + ".json"));
    const auto sends = spans(events, "send");
    const auto recvs = spans(events, "recv");
    const auto waits = spans(events, "wait");
    REQUIRE(sends.size() == 3);
    REQUIRE(recvs.size() == 3);
    REQUIRE(waits.size() == 6);
    const long long sent = r == 0 ? 1000 : 64, received = r == 0 ? 64 : 1000;
    for (int i = 0; i < 3; ++i) {
      CHECK(sends[i].at("cat") == "comm");
      CHECK(sends[i].at("pid") == r);
      CHECK(sends[i].at("args").at("peer") == 1 - r);
      CHECK(sends[i].at("args").at("bytes") == sent);
      CHECK(sends[i].at("args").at("op") == 3);
      CHECK(sends[i].at("args").at("round") == 5);
      CHECK(sends[i].at("args").at("chunk") == (r == 0 ? 1 : 2));
      CHECK(sends[i].at("args").at("step") == i);
      CHECK(recvs[i].at("args").at("peer") == 1 - r);
      CHECK(recvs[i].at("args").at("bytes") == received);
      CHECK(recvs[i].at("args").at("step") == i);
    }
    for (const auto& w : waits) {
      CHECK(w.at("cat") == "wait");
      CHECK(w.at("args").at("peer") == 1 - r);
    }
    // Each operation's span starts at its post and ends when its wait returns, so it covers the wait.
    for (const auto& op : {sends, recvs})
      for (const auto& s : op) {
        const double b = s.at("ts").get<double>(), e = b + s.at("dur").get<double>();
        bool covered = false;
        for (const auto& w : waits) {
          const double wb = w.at("ts").get<double>(), we = wb + w.at("dur").get<double>();
          if (wb >= b && we <= e + 0.001 && w.at("args").at("bytes") == s.at("args").at("bytes"))
            covered = true;
        }
        CHECK(covered);
      }
  }
}

TEST_CASE("TracingTransport over an off tracer passes through and records nothing") {
  InprocFabric fabric(2);
  Tracer off[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      TracingTransport t(fabric.peer(r), off[r]);
      exchange(t, 50);
      CHECK(t.timeout() == fabric.peer(r).timeout());
    });
  for (auto& t : threads) t.join();
  CHECK(off[0].written() == 0);
  CHECK(off[1].written() == 0);
}

TEST_CASE("TracingTransport: a trace write that fails after a wait poisons the transport") {
  // A file size limit makes the kernel refuse the trace's writes past 16 KiB (EFBIG). Rank 1's
  // messages are posted before rank 0's receives, which take them at once: one thread runs both.
  TempDir dir;
  const std::string path = dir.file("part.json");
  InprocFabric fabric(2, std::chrono::milliseconds(300));
  dpg::net::Transport& one = fabric.peer(1);
  Tracer tracer;
  TracingTransport t(fabric.peer(0), tracer);
  std::string message;
  std::vector<std::byte> out(64, std::byte{0x55}), in(64);
  uint64_t round = 0;
  {
    const dpg::trace::testing::FileSizeLimit limit(16384);
    tracer.open(path, 0, "rank 0", dpg::trace::Options{.flush_events = 16});
    for (; round < 100000 && message.empty(); ++round) {
      const Handle sent = one.send(0, Tag{3, round, 0}, out);
      try {
        t.wait(t.recv(1, Tag{3, round, 0}, in));
      } catch (const dpg::Error& e) {
        message = e.what();
      }
      one.wait(sent);  // matched when rank 0 posted
    }
  }
  CAPTURE(message);
  REQUIRE(message.find("trace: cannot write") != std::string::npos);
  // The failure poisoned rank 0's transport: a receive posted now is never written, and its wait
  // throws the trace's failure, not a timeout.
  std::vector<std::byte> after(64, std::byte{0x11});
  const Handle h = t.recv(1, Tag{3, round, 0}, after);
  CHECK_THROWS_AS(one.wait(one.send(0, Tag{3, round, 0}, out)), dpg::Error);
  CHECK(std::count(after.begin(), after.end(), std::byte{0x11}) == 64);
  try {
    t.wait(h);
    FAIL("the wait after the failure returned");
  } catch (const dpg::Error& e) {
    CHECK(std::string(e.what()).find("trace: cannot write") != std::string::npos);
  }
}
