// Measures what a link delivers, to print beside what it was asked (link_shape.h): a ping-pong
// of small messages for the one-way latency, then a bulk transfer for the bandwidth. Both ends of
// the link call probe_link with each other's rank at the same point of their programs; the
// other peers need not take part. Its messages carry kOpProbe, each in a round of its own.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "runtime/net/link_shape.h"
#include "runtime/net/ops.h"
#include "runtime/net/transport.h"

namespace dpg::net {

struct ProbeOptions {
  int pings = 20;                         // round trips of a 64-byte message (the median counts)
  std::size_t bulk_bytes = 8u << 20;      // the bulk transfer, in pieces of piece_bytes
  std::size_t piece_bytes = 256u << 10;
};

struct ProbeResult {
  std::chrono::nanoseconds one_way{0};  // half the median round trip
  std::chrono::nanoseconds min_one_way{0}, max_one_way{0};
  double bits_per_second = 0;           // bulk bytes over (elapsed - 2 x one-way)
};

// `first` is the end that starts each ping and sends the bulk (the smaller rank, by convention);
// the result is measured there and sent to the other end, so both return the same figures.
ProbeResult probe_link(Transport& t, int peer, bool first, const ProbeOptions& o = {});

// The bulk size that takes about `seconds` at the asked bandwidth (unlimited: 16 MiB), between
// 256 KiB and 256 MiB.
std::size_t bulk_bytes_for(const LinkShape& asked, double seconds);

// "asked latency 10ms bw 100Mbit, delivered 10.04ms (9.98-10.3) and 98.7Mbit (0.99x)".
std::string delivered_text(const LinkShape& asked, const ProbeResult& r);

}  // namespace dpg::net
