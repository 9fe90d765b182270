#include "runtime/net/link_probe.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "runtime/core/error.h"

namespace dpg::net {
namespace {

using Clock = std::chrono::steady_clock;

void exchange_one(Transport& t, int peer, Tag tag, bool send, std::span<std::byte> buf) {
  const Handle h = send ? t.send(peer, tag, buf) : t.recv(peer, tag, buf);
  t.wait(h);
}

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

ProbeResult probe_link(Transport& t, int peer, bool first, const ProbeOptions& o) {
  if (o.pings < 1 || o.piece_bytes == 0 || o.bulk_bytes < o.piece_bytes) {
    fail(Code::invalid_argument, "probe_link: at least one ping and one bulk piece");
  }
  std::vector<std::byte> small(64);
  std::vector<double> rtt;
  rtt.reserve(static_cast<std::size_t>(o.pings));
  uint64_t round = 0;
  for (int i = 0; i < o.pings; ++i) {
    const auto t0 = Clock::now();
    if (first) {
      exchange_one(t, peer, {kOpProbe, round, 0}, true, small);
      exchange_one(t, peer, {kOpProbe, round, 1}, false, small);
      rtt.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    } else {
      exchange_one(t, peer, {kOpProbe, round, 0}, false, small);
      exchange_one(t, peer, {kOpProbe, round, 1}, true, small);
    }
    ++round;
  }
  // The bulk: every piece posted at once, then one small reply when the last has arrived.
  const std::size_t pieces = o.bulk_bytes / o.piece_bytes;
  std::vector<std::byte> bulk(pieces * o.piece_bytes);
  std::vector<Handle> handles;
  handles.reserve(pieces);
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < pieces; ++i) {
    std::span<std::byte> piece(bulk.data() + i * o.piece_bytes, o.piece_bytes);
    const Tag tag{kOpProbe, round, static_cast<uint32_t>(i)};
    handles.push_back(first ? t.send(peer, tag, piece) : t.recv(peer, tag, piece));
  }
  for (const Handle& h : handles) t.wait(h);
  exchange_one(t, peer, {kOpProbe, round + 1, 0}, !first, small);
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  // The figures, measured by `first`, go to the other end.
  double figures[4] = {0, 0, 0, 0};
  if (first) {
    std::sort(rtt.begin(), rtt.end());
    const double one_way = rtt[rtt.size() / 2] / 2;
    const double transfer = std::max(elapsed - 2 * one_way, 1e-9);
    figures[0] = one_way;
    figures[1] = rtt.front() / 2;
    figures[2] = rtt.back() / 2;
    figures[3] = static_cast<double>(bulk.size()) * 8 / transfer;
  }
  std::span<std::byte> bytes(reinterpret_cast<std::byte*>(figures), sizeof figures);
  exchange_one(t, peer, {kOpProbe, round + 2, 0}, first, bytes);
  ProbeResult r;
  auto ns = [](double s) { return std::chrono::nanoseconds(std::llround(s * 1e9)); };
  r.one_way = ns(figures[0]);
  r.min_one_way = ns(figures[1]);
  r.max_one_way = ns(figures[2]);
  r.bits_per_second = figures[3];
  return r;
}

std::size_t bulk_bytes_for(const LinkShape& asked, double seconds) {
  double bytes = asked.bits_per_second > 0 ? asked.bits_per_second * seconds / 8 : 16.0 * (1 << 20);
  bytes = std::clamp(bytes, 256.0 * 1024, 256.0 * (1 << 20));
  const std::size_t piece = 256u << 10;
  return static_cast<std::size_t>(bytes) / piece * piece;
}

std::string delivered_text(const LinkShape& asked, const ProbeResult& r) {
  const double ms = static_cast<double>(r.one_way.count()) * 1e-6;
  std::string s = "asked latency " + duration_text(asked.latency);
  if (asked.jitter.count() > 0) s += " jitter " + duration_text(asked.jitter);
  s += " bw " + bandwidth_text(asked.bits_per_second);
  if (asked.loss > 0) s += " loss " + loss_text(asked.loss);
  s += "; delivered latency " + fixed(ms, 3) + "ms (" +
       fixed(static_cast<double>(r.min_one_way.count()) * 1e-6, 3) + "-" +
       fixed(static_cast<double>(r.max_one_way.count()) * 1e-6, 3) + "), " +
       (ms >= 0 ? "off by " + fixed(ms - static_cast<double>(asked.latency.count()) * 1e-6, 3) + "ms" : "");
  s += ", bw " + bandwidth_text(r.bits_per_second);
  if (asked.bits_per_second > 0) s += " (" + fixed(r.bits_per_second / asked.bits_per_second, 3) + "x)";
  return s;
}

}  // namespace dpg::net
