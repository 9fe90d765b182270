// The emulated network: the description's two forms and their errors, and ShapedTransport over
// the in-process fabric. Times are checked from below (a shaped message never arrives before its
// latency and its bytes at the bandwidth allow), which load cannot break; how close the delivered
// figures come to the asked ones is what `dpgossip bench link` prints (docs/BENCHMARKS.md).
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/net/inproc/inproc_transport.h"
#include "runtime/net/link_probe.h"
#include "runtime/net/link_shape.h"
#include "runtime/net/shaped_transport.h"

using namespace std::chrono_literals;
using dpg::Json;
using dpg::net::apply_link_flag;
using dpg::net::LinkShape;
using dpg::net::NetworkShape;
using dpg::net::ShapedTransport;
using dpg::net::Tag;
using Clock = std::chrono::steady_clock;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const dpg::Error& e) {
    return e.what();
  }
  return "";
}

NetworkShape flags(std::initializer_list<const char*> list) {
  NetworkShape n;
  for (const char* f : list) apply_link_flag(n, f);
  return n;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

TEST_CASE("a link flag sets the fields it names over the default") {
  const NetworkShape n = flags({"default:latency=1ms,bw=1Gbit", "0-1:latency=10ms,jitter=1ms",
                                "2-1:bandwidth=100Mbit,loss=0.1%"});
  const LinkShape d = n.between(2, 3);
  CHECK(d.latency == 1ms);
  CHECK(d.bits_per_second == doctest::Approx(1e9));
  CHECK(d.loss == 0);
  const LinkShape a = n.between(1, 0);  // either direction
  CHECK(a.latency == 10ms);
  CHECK(a.jitter == 1ms);
  CHECK(a.bits_per_second == doctest::Approx(1e9));
  const LinkShape b = n.between(1, 2);
  CHECK(b.latency == 1ms);
  CHECK(b.bits_per_second == doctest::Approx(1e8));
  CHECK(b.loss == doctest::Approx(0.001));
  CHECK(n.any());
  CHECK_FALSE(NetworkShape{}.any());
  CHECK_FALSE(NetworkShape{}.between(0, 1).shaped());
}

TEST_CASE("the canonical text reads back as the same network") {
  const NetworkShape n = flags({"default:latency=250us,bw=1.5Gbit", "0-3:latency=10ms,loss=2%",
                                "1-2:jitter=0.5ms"});
  const std::string text = n.describe();
  CHECK(text == "default:latency=250us,bw=1.5Gbit 0-3:latency=10ms,loss=2% 1-2:jitter=0.5ms");
  NetworkShape back;
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find(' ', begin);
    if (end == std::string::npos) end = text.size();
    apply_link_flag(back, text.substr(begin, end - begin));
    begin = end + 1;
  }
  CHECK(back.describe() == text);
  CHECK(back.between(0, 3) == n.between(3, 0));
}

TEST_CASE("a network file and its errors") {
  const Json j = Json::parse(R"({"default": {"latency": "1ms", "bandwidth": "1Gbit"},
      "links": [{"peers": [0, 1], "latency": "10ms", "bandwidth": "100Mbit", "loss": 0.001}],
      "seed": 7})");
  const NetworkShape n = dpg::net::network_from_json(j, "net.json:");
  CHECK(n.seed == 7);
  CHECK(n.between(0, 1).latency == 10ms);
  CHECK(n.between(0, 1).loss == doctest::Approx(0.001));
  CHECK(n.between(0, 2).latency == 1ms);
  auto bad = [](const char* text) {
    return error_of([&] { dpg::net::network_from_json(Json::parse(text), "net.json:"); });
  };
  CHECK(bad(R"({"default": {"latency": "5 parsecs"}})").find("net.json: /default/latency") !=
        std::string::npos);
  CHECK(bad(R"({"default": {"latency": 5}})").find("expected a string with a unit") !=
        std::string::npos);
  CHECK(bad(R"({"default": {"bandwidth": "10Mbyte"}})").find("/default/bandwidth") !=
        std::string::npos);
  CHECK(bad(R"({"default": {"loss": "60%"}})").find("at most 50%") != std::string::npos);
  CHECK(bad(R"({"default": {"delay": "1ms"}})").find("unknown field") != std::string::npos);
  CHECK(bad(R"({"links": [{"peers": [1, 1]}]})").find("/links/0/peers") != std::string::npos);
  CHECK(bad(R"({"links": [{"peers": [0, 1]}, {"peers": [1, 0]}]})").find("given twice") !=
        std::string::npos);
  CHECK(bad(R"({"topology": 1})").find("topology") != std::string::npos);
  CHECK(bad(R"({"default": {"latency": "120s"}})").find("at most") != std::string::npos);
  const std::string ranks = error_of([&] { n.check_ranks(1, "net.json"); });
  CHECK(ranks.find("link 0-1 names rank 1") != std::string::npos);
  CHECK(error_of([&] { n.check_ranks(2, "net.json"); }).empty());
}

TEST_CASE("a bad link flag is quoted") {
  auto bad = [](const char* text) {
    return error_of([&] {
      NetworkShape n;
      apply_link_flag(n, text);
    });
  };
  CHECK(bad("0-1").find("--link \"0-1\"") != std::string::npos);
  CHECK(bad("0-0:latency=1ms").find("two different ranks") != std::string::npos);
  CHECK(bad("a-b:latency=1ms").find("two different ranks") != std::string::npos);
  CHECK(bad("0-1:latency").find("expected field=value") != std::string::npos);
  CHECK(bad("0-1:latency=-1ms").find("not negative") != std::string::npos);
  CHECK(bad("0-1:bw=1bit").find("between 1kbit") != std::string::npos);
  CHECK(bad("default:speed=1").find("unknown field") != std::string::npos);
}

TEST_CASE("a shaped message arrives after its latency and its bytes at the bandwidth") {
  dpg::net::InprocFabric fabric(2, 10s);
  // 4 MiB at 200 Mbit/s: 168 ms on the wire, then 20 ms of latency.
  const NetworkShape n = flags({"0-1:latency=20ms,bw=200Mbit"});
  const double wire_s = 4.0 * (1 << 20) * 8 / 200e6;
  std::vector<std::byte> out(4u << 20), in(out.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>(i * 7);
  double small_s = 0, send_s = 0, arrived_s = 0;
  const auto start = Clock::now();
  std::thread receiver([&] {
    auto& t = fabric.peer(1);
    std::byte b[8];
    t.wait(t.recv(0, {1, 0, 0}, b));
    t.wait(t.recv(0, {1, 1, 0}, in));
    arrived_s = seconds_since(start);
  });
  {
    ShapedTransport shaped(fabric.peer(0), n);
    CHECK(shaped.shape(1).latency == 20ms);
    std::byte b[8] = {};
    auto t0 = Clock::now();
    shaped.wait(shaped.send(1, {1, 0, 0}, b));
    // The small message left at once: its wait does not include the latency.
    small_s = seconds_since(t0);
    t0 = Clock::now();
    shaped.wait(shaped.send(1, {1, 1, 0}, out));
    send_s = seconds_since(t0);
  }  // the destructor delivers what is still on the link
  receiver.join();
  CHECK(in == out);
  CHECK(small_s < 0.020);  // posted and serialised, not delivered
  CHECK(send_s >= wire_s * 0.99);  // its wait returns once its last byte has left
  CHECK(arrived_s >= wire_s * 0.99 + 0.020);  // and it arrives a latency later
}

TEST_CASE("a receive waits for the latency; an unshaped link is not delayed") {
  dpg::net::InprocFabric fabric(3, 10s);
  const NetworkShape n = flags({"0-1:latency=30ms"});
  double shaped_s = 0, plain_s = 0;
  std::thread peer1([&] {
    auto& t = fabric.peer(1);
    std::byte b[4];
    t.wait(t.recv(0, {2, 0, 0}, b));  // a start signal, unshaped direction does not exist here
  });
  std::thread peer2([&] {
    auto& t = fabric.peer(2);
    std::byte b[4];
    t.wait(t.recv(0, {2, 0, 0}, b));
  });
  ShapedTransport shaped(fabric.peer(0), n);
  std::byte b[4] = {};
  auto t0 = Clock::now();
  shaped.wait(shaped.send(2, {2, 0, 0}, b));
  peer2.join();
  plain_s = seconds_since(t0);
  t0 = Clock::now();
  shaped.wait(shaped.send(1, {2, 0, 0}, b));
  peer1.join();
  shaped_s = seconds_since(t0);
  CHECK(shaped_s >= 0.030);
  CHECK(plain_s < 0.030);
}

TEST_CASE("jittered messages on one link arrive in the order they were sent") {
  dpg::net::InprocFabric fabric(2, 10s);
  const NetworkShape n = flags({"0-1:latency=2ms,jitter=2ms"});
  constexpr int kCount = 50;
  std::vector<int> order;
  std::thread receiver([&] {
    auto& t = fabric.peer(1);
    std::vector<int> got(kCount, -1);
    std::vector<dpg::net::Handle> hs;
    for (int i = 0; i < kCount; ++i) {
      hs.push_back(t.recv(0, {3, static_cast<uint64_t>(i), 0},
                          std::as_writable_bytes(std::span<int>(&got[static_cast<std::size_t>(i)], 1))));
    }
    // Waiting in reverse order still finds every message; the payloads say what was sent.
    for (int i = kCount - 1; i >= 0; --i) t.wait(hs[static_cast<std::size_t>(i)]);
    order = got;
  });
  ShapedTransport shaped(fabric.peer(0), n);
  std::vector<int> values(kCount);
  std::vector<dpg::net::Handle> hs;
  for (int i = 0; i < kCount; ++i) {
    values[static_cast<std::size_t>(i)] = i;
    hs.push_back(shaped.send(1, {3, static_cast<uint64_t>(i), 0},
                             std::as_bytes(std::span<int>(&values[static_cast<std::size_t>(i)], 1))));
  }
  for (auto h : hs) shaped.wait(h);
  receiver.join();
  for (int i = 0; i < kCount; ++i) CHECK(order[static_cast<std::size_t>(i)] == i);
}

TEST_CASE("a poisoned shaped transport fails its waits and the inner transport") {
  dpg::net::InprocFabric fabric(2, 2s);
  const NetworkShape n = flags({"0-1:latency=1s"});
  ShapedTransport shaped(fabric.peer(0), n);
  std::byte b[4] = {};
  const dpg::net::Handle h = shaped.send(1, {4, 0, 0}, b);
  shaped.poison(dpg::Code::aborted, "rank 0: stopped by the test");
  const std::string e = error_of([&] { shaped.wait(shaped.send(1, {4, 1, 0}, b)); });
  CHECK(e.find("stopped by the test") != std::string::npos);
  (void)h;
  std::byte r[4];
  const std::string inner = error_of([&] { fabric.peer(0).wait(fabric.peer(0).recv(1, {4, 2, 0}, r)); });
  CHECK(inner.find("stopped by the test") != std::string::npos);
}

TEST_CASE("the probe measures a shaped link from below") {
  dpg::net::InprocFabric fabric(2, 20s);
  const NetworkShape n = flags({"default:latency=5ms,bw=400Mbit"});
  dpg::net::ProbeOptions o;
  o.pings = 5;
  o.bulk_bytes = 4u << 20;
  dpg::net::ProbeResult r0, r1;
  std::thread other([&] {
    ShapedTransport shaped(fabric.peer(1), n);
    r1 = dpg::net::probe_link(shaped, 0, false, o);
  });
  {
    ShapedTransport shaped(fabric.peer(0), n);
    r0 = dpg::net::probe_link(shaped, 1, true, o);
  }
  other.join();
  CHECK(r0.one_way == r1.one_way);
  CHECK(r0.bits_per_second == r1.bits_per_second);
  CHECK(r0.one_way >= 5ms);
  CHECK(r0.min_one_way >= 5ms);
  // The bandwidth is measured after the latency is taken out: it cannot be far above the asked.
  CHECK(r0.bits_per_second < 400e6 * 1.10);
  CHECK(r0.bits_per_second > 0);
  const std::string text = dpg::net::delivered_text(n.between(0, 1), r0);
  CHECK(text.find("asked latency 5ms bw 400Mbit; delivered latency") == 0);
}
