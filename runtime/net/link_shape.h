// An emulated network: what each link between two peers delivers (latency, jitter, bandwidth,
// loss), read from a network file beside the hosts file and from --link flags, and applied by
// ShapedTransport (shaped_transport.h) on the sending side of any transport. A pure value: every
// peer of a run reads the same description, and its canonical text is part of the handshake, so
// peers that disagree on the network refuse to connect. docs/HETEROGENEITY.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/json_io.h"

namespace dpg::net {

// What one direction of a link delivers. Bandwidth 0 is unlimited; loss is a probability per
// segment of kSegmentBytes (each lost segment costs a retransmission: one more round trip).
struct LinkShape {
  std::chrono::nanoseconds latency{0};  // one way
  std::chrono::nanoseconds jitter{0};   // standard deviation of a normal added to the latency
  double bits_per_second = 0;
  double loss = 0;
  bool shaped() const {
    return latency.count() > 0 || jitter.count() > 0 || bits_per_second > 0 || loss > 0;
  }
  bool operator==(const LinkShape&) const = default;
};

inline constexpr std::size_t kSegmentBytes = 1448;  // a TCP segment on a 1500-byte MTU

// Some of a link's fields: an entry of the file or of a --link flag sets only what it names, over
// the default link's.
struct LinkSpec {
  std::optional<std::chrono::nanoseconds> latency, jitter;
  std::optional<double> bits_per_second, loss;
  LinkShape over(LinkShape base) const;
  bool operator==(const LinkSpec&) const = default;
};

struct NetworkShape {
  LinkSpec fallback;                          // every link (the "default" entry)
  std::map<std::pair<int, int>, LinkSpec> links;  // both directions of a pair, smaller rank first
  std::uint64_t seed = 1;                     // jitter and loss draws (per directed link)

  // What the link from `from` to `to` delivers.
  LinkShape between(int from, int to) const;
  bool any() const;  // whether some link is shaped
  // Throws invalid_argument naming `where` and the entry when a rank is not below `world`.
  void check_ranks(int world, const std::string& where) const;
  // "default latency=1ms bw=1Gbit; 0-1 latency=10ms bw=100Mbit": the flag form, canonical, for
  // the start-up log and the handshake hash.
  std::string describe() const;
};

// Reads a network file: {"default": {...}, "links": [{"peers": [0, 1], ...}], "seed": 7}, each
// link's fields "latency", "jitter" ("5ms", "250us", "0.01s"), "bandwidth" ("100Mbit",
// "1Gbit", "800kbit") and "loss" ("0.1%" or 0.001). Errors name the file and the JSON path.
NetworkShape network_from_json(const Json& j, const std::string& where);
NetworkShape load_network(const std::string& path);
// Applies one flag: "0-1:latency=5ms,bw=100Mbit,jitter=1ms,loss=0.1%" or "default:latency=1ms"
// (bw or bandwidth). A flag's fields replace those the file gave for the same link. Errors quote
// the flag.
void apply_link_flag(NetworkShape& net, const std::string& flag);

// "5ms", "250us", "2s" (ns, us, ms or s; not negative, at most max_s); errors start with `what`.
std::chrono::nanoseconds parse_duration(const std::string& text, const std::string& what,
                                        double max_s);

// The text forms of the units, for messages and describe(): "1.5ms", "100Mbit", "0.1%".
std::string duration_text(std::chrono::nanoseconds d);
std::string bandwidth_text(double bits_per_second);
std::string loss_text(double loss);

}  // namespace dpg::net
