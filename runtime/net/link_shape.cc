#include "runtime/net/link_shape.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "runtime/core/bounds.h"
#include "runtime/core/error.h"

namespace dpg::net {
namespace {

constexpr double kMaxLatencyS = 60;
constexpr double kMaxJitterS = 10;
constexpr double kMinBits = 1e3;
constexpr double kMaxBits = 1e13;
constexpr double kMaxLoss = 0.5;

[[noreturn]] void bad(const std::string& what) { fail(Code::invalid_argument, what); }

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// "12.5ms" -> (12.5, "ms"); the number must be finite and not negative.
std::pair<double, std::string> split_number(const std::string& text, const std::string& what) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  if (r.ec != std::errc() || r.ptr == text.data() || !std::isfinite(v) || v < 0) {
    bad(what + ": expected a number that is not negative, then a unit, got \"" + shorten(text) +
        "\"");
  }
  return {v, lower(std::string(r.ptr, end))};
}

}  // namespace

std::chrono::nanoseconds parse_duration(const std::string& text, const std::string& what,
                                        double max_s) {
  const auto [v, unit] = split_number(text, what);
  double s = 0;
  if (unit == "ns") s = v * 1e-9;
  else if (unit == "us") s = v * 1e-6;
  else if (unit == "ms") s = v * 1e-3;
  else if (unit == "s") s = v;
  else bad(what + ": expected a time with a unit (ns, us, ms or s), got \"" + shorten(text) + "\"");
  if (s > max_s) bad(what + ": at most " + duration_text(std::chrono::seconds(static_cast<long long>(max_s))) + ", got \"" + shorten(text) + "\"");
  return std::chrono::nanoseconds(std::llround(s * 1e9));
}

namespace {

double parse_bandwidth(const std::string& text, const std::string& what) {
  if (lower(text) == "unlimited") return 0;
  const auto [v, unit] = split_number(text, what);
  double scale = 0;
  if (unit == "bit") scale = 1;
  else if (unit == "kbit") scale = 1e3;
  else if (unit == "mbit") scale = 1e6;
  else if (unit == "gbit") scale = 1e9;
  else if (unit == "tbit") scale = 1e12;
  else {
    bad(what + ": expected bits per second with a unit (bit, kbit, mbit, gbit or tbit, powers "
               "of 1000) or unlimited, got \"" + shorten(text) + "\"");
  }
  const double bits = v * scale;
  if (bits < kMinBits || bits > kMaxBits) {
    bad(what + ": between 1kbit and 10000Gbit (or unlimited), got \"" + shorten(text) + "\"");
  }
  return bits;
}

double parse_loss(const std::string& text, const std::string& what) {
  const auto [v, unit] = split_number(text, what);
  double p = 0;
  if (unit == "%") p = v / 100;
  else if (unit.empty()) p = v;
  else bad(what + ": expected a probability (0.001) or a percentage (0.1%), got \"" + shorten(text) + "\"");
  if (p > kMaxLoss) bad(what + ": at most 50%, got \"" + shorten(text) + "\"");
  return p;
}

// One field of a link by name (JSON key or flag key); `what` names it for errors.
void set_field(LinkSpec& spec, const std::string& key, const std::string& value,
               const std::string& what) {
  if (key == "latency") spec.latency = parse_duration(value, what, kMaxLatencyS);
  else if (key == "jitter") spec.jitter = parse_duration(value, what, kMaxJitterS);
  else if (key == "bandwidth" || key == "bw") spec.bits_per_second = parse_bandwidth(value, what);
  else if (key == "loss") spec.loss = parse_loss(value, what);
  else bad(what + ": unknown field (latency, jitter, bandwidth or bw, loss)");
}

void merge(LinkSpec& into, const LinkSpec& from) {
  if (from.latency) into.latency = from.latency;
  if (from.jitter) into.jitter = from.jitter;
  if (from.bits_per_second) into.bits_per_second = from.bits_per_second;
  if (from.loss) into.loss = from.loss;
}

LinkSpec spec_from_json(const Json& j, const std::string& where, bool with_peers) {
  if (!j.is_object()) bad(where + ": expected an object, got " + quote(j));
  LinkSpec spec;
  for (const auto& [key, value] : j.items()) {
    if (with_peers && key == "peers") continue;
    const std::string what = where + "/" + key;
    if (key == "loss" && value.is_number()) {
      set_field(spec, key, value.dump(), what);
      continue;
    }
    if (!value.is_string()) bad(what + ": expected a string with a unit, got " + quote(value));
    set_field(spec, key, value.get<std::string>(), what);
  }
  return spec;
}

std::string spec_text(const LinkSpec& s) {
  std::string out;
  auto add = [&](const std::string& kv) { out += (out.empty() ? "" : ",") + kv; };
  if (s.latency) add("latency=" + duration_text(*s.latency));
  if (s.jitter) add("jitter=" + duration_text(*s.jitter));
  if (s.bits_per_second) add("bw=" + bandwidth_text(*s.bits_per_second));
  if (s.loss) add("loss=" + loss_text(*s.loss));
  return out;
}

std::string trimmed(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

LinkShape LinkSpec::over(LinkShape base) const {
  if (latency) base.latency = *latency;
  if (jitter) base.jitter = *jitter;
  if (bits_per_second) base.bits_per_second = *bits_per_second;
  if (loss) base.loss = *loss;
  return base;
}

LinkShape NetworkShape::between(int from, int to) const {
  LinkShape s = fallback.over({});
  auto it = links.find({std::min(from, to), std::max(from, to)});
  if (it != links.end()) s = it->second.over(s);
  return s;
}

bool NetworkShape::any() const {
  if (fallback.over({}).shaped()) return true;
  return std::any_of(links.begin(), links.end(),
                     [](const auto& l) { return l.second.over({}).shaped(); });
}

void NetworkShape::check_ranks(int world, const std::string& where) const {
  for (const auto& [pair, spec] : links) {
    if (pair.second >= world) {
      bad(where + ": link " + std::to_string(pair.first) + "-" + std::to_string(pair.second) +
          " names rank " + std::to_string(pair.second) + ", but the run has " +
          std::to_string(world) + " peers (ranks 0 to " + std::to_string(world - 1) + ")");
    }
  }
}

std::string NetworkShape::describe() const {
  std::string out;
  const std::string d = spec_text(fallback);
  if (!d.empty()) out = "default:" + d;
  for (const auto& [pair, spec] : links) {
    const std::string s = spec_text(spec);
    if (s.empty()) continue;
    out += (out.empty() ? "" : " ") + std::to_string(pair.first) + "-" +
           std::to_string(pair.second) + ":" + s;
  }
  if (out.empty()) return "";
  return out + (seed != 1 ? " seed=" + std::to_string(seed) : "");
}

NetworkShape network_from_json(const Json& j, const std::string& where) {
  if (!j.is_object()) bad(where + " expected an object, got " + quote(j));
  JsonReader r(j, where);
  r.reject_unknown({"default", "links", "seed"});
  NetworkShape net;
  if (r.has("default")) net.fallback = spec_from_json(r.at("default"), where + " /default", false);
  if (r.has("seed")) {
    const long long s = r.integer("seed");
    if (s < 0) r.fail_at("seed", "expected an integer that is not negative");
    net.seed = static_cast<std::uint64_t>(s);
  }
  if (!r.has("links")) return net;
  const Json& links = r.at("links");
  if (!links.is_array()) r.fail_at("links", "expected an array, got " + quote(links));
  for (std::size_t i = 0; i < links.size(); ++i) {
    const std::string at = where + " /links/" + std::to_string(i);
    const Json& e = links[i];
    if (!e.is_object() || !e.contains("peers")) bad(at + ": expected an object with \"peers\": [a, b]");
    const Json& p = e["peers"];
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number_integer()) {
      bad(at + "/peers: expected two ranks, got " + quote(p));
    }
    const long long a = p[0].get<long long>(), b = p[1].get<long long>();
    if (a < 0 || b < 0 || a == b || a > (1 << 20) || b > (1 << 20)) {
      bad(at + "/peers: expected two different ranks that are not negative, got " + quote(p));
    }
    const std::pair<int, int> key{static_cast<int>(std::min(a, b)), static_cast<int>(std::max(a, b))};
    if (net.links.count(key)) bad(at + ": the link " + quote(p) + " is given twice");
    net.links[key] = spec_from_json(e, at, true);
  }
  return net;
}

NetworkShape load_network(const std::string& path) {
  return network_from_json(read_json_file(path), path + ":");
}

void apply_link_flag(NetworkShape& net, const std::string& flag) {
  const std::string what = "--link \"" + shorten(flag) + "\"";
  const std::size_t colon = flag.find(':');
  if (colon == std::string::npos) {
    bad(what + ": expected A-B:field=value,... or default:field=value,... (fields latency, "
               "jitter, bw, loss)");
  }
  const std::string who = flag.substr(0, colon);
  LinkSpec spec;
  std::size_t begin = colon + 1;
  while (begin <= flag.size()) {
    std::size_t end = flag.find(',', begin);
    if (end == std::string::npos) end = flag.size();
    const std::string item = flag.substr(begin, end - begin);
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) bad(what + ": expected field=value, got \"" + shorten(item) + "\"");
    set_field(spec, item.substr(0, eq), item.substr(eq + 1), what + " " + item.substr(0, eq));
    begin = end + 1;
  }
  if (who == "default") {
    merge(net.fallback, spec);
    return;
  }
  const std::size_t dash = who.find('-');
  int a = -1, b = -1;
  auto rank = [&](std::string_view s, int& v) {
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    return r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty() && v >= 0 &&
           v <= (1 << 20);
  };
  if (dash == std::string::npos || !rank(std::string_view(who).substr(0, dash), a) ||
      !rank(std::string_view(who).substr(dash + 1), b) || a == b) {
    bad(what + ": expected two different ranks A-B or default before the colon, got \"" +
        shorten(who) + "\"");
  }
  merge(net.links[{std::min(a, b), std::max(a, b)}], spec);
}

std::string duration_text(std::chrono::nanoseconds d) {
  const double ns = static_cast<double>(d.count());
  if (ns == 0) return "0ms";
  if (ns >= 1e9 && std::fmod(ns, 1e8) == 0) return trimmed(ns / 1e9) + "s";
  if (ns >= 1e6 || std::fmod(ns, 1e5) == 0) return trimmed(ns / 1e6) + "ms";
  if (std::fmod(ns, 1e3) == 0) return trimmed(ns / 1e3) + "us";
  return trimmed(ns) + "ns";
}

std::string bandwidth_text(double bits) {
  if (bits <= 0) return "unlimited";
  if (bits >= 1e9) return trimmed(bits / 1e9) + "Gbit";
  if (bits >= 1e6) return trimmed(bits / 1e6) + "Mbit";
  if (bits >= 1e3) return trimmed(bits / 1e3) + "kbit";
  return trimmed(bits) + "bit";
}

std::string loss_text(double loss) { return trimmed(loss * 100) + "%"; }

}  // namespace dpg::net
