#include "runtime/train/straggler.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <thread>

#include "runtime/core/bounds.h"
#include "runtime/core/error.h"
#include "runtime/net/link_shape.h"

namespace dpg::train {
namespace {

constexpr double kMaxFactor = 1000;
constexpr long long kMaxRank = 1 << 20;

template <class T> bool number(std::string_view s, T& v) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace

Slowdown parse_slowdown(const std::string& flag) {
  const std::string what = "--slowdown \"" + shorten(flag) + "\"";
  auto bad = [&](const std::string& why) { fail(Code::invalid_argument, what + ": " + why); };
  const std::size_t colon = flag.find(':');
  Slowdown s;
  long long rank = -1;
  if (colon == std::string::npos || !number(std::string_view(flag).substr(0, colon), rank) ||
      rank < 0 || rank > kMaxRank) {
    bad("expected RANK:FACTOR, RANK:FACTOR@epoch:E, RANK:FACTOR@step:S or "
        "RANK:stall=TIME/STEPS, with a rank that is not negative");
  }
  s.rank = static_cast<int>(rank);
  std::string rest = flag.substr(colon + 1);
  if (rest.starts_with("stall=")) {
    const std::size_t slash = rest.find('/');
    if (slash == std::string::npos) bad("expected stall=TIME/STEPS, e.g. stall=2s/100");
    const std::string time = rest.substr(6, slash - 6);
    s.stall = net::parse_duration(time, what + " stall", 60);
    if (!number(std::string_view(rest).substr(slash + 1), s.every) || s.every < 1) {
      bad("the period after / is a number of steps, at least 1");
    }
    if (s.stall.count() <= 0) bad("the stall must be longer than 0");
    return s;
  }
  const std::size_t at = rest.find('@');
  if (!number(std::string_view(rest).substr(0, at), s.factor) || !std::isfinite(s.factor) ||
      s.factor < 1 || s.factor > kMaxFactor) {
    bad("the factor is a number in [1, 1000] (how many times slower)");
  }
  if (at == std::string::npos) return s;
  const std::string when = rest.substr(at + 1);
  if (when.starts_with("epoch:")) {
    s.in_epochs = true;
  } else if (when.starts_with("step:")) {
    s.in_epochs = false;
  } else {
    bad("after @ comes epoch:E or step:S");
  }
  const std::string value = when.substr(when.find(':') + 1);
  if (!number(value, s.at) || !std::isfinite(s.at) || s.at < 0 || s.at > 1e12) {
    bad("the start \"" + shorten(value) + "\" is a number that is not negative");
  }
  return s;
}

std::string to_string(const Slowdown& s) {
  std::string out = std::to_string(s.rank) + ":";
  if (s.every > 0) {
    return out + "stall=" + net::duration_text(s.stall) + "/" + std::to_string(s.every);
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", s.factor);
  out += buf;
  if (s.at > 0) {
    std::snprintf(buf, sizeof buf, "%g", s.at);
    out += std::string("@") + (s.in_epochs ? "epoch:" : "step:") + buf;
  }
  return out;
}

void check_slowdown_ranks(const std::vector<Slowdown>& all, int world) {
  for (const Slowdown& s : all) {
    if (s.rank >= world) {
      fail(Code::invalid_argument, "--slowdown \"" + to_string(s) + "\": rank " +
                                       std::to_string(s.rank) + ", but the run has " +
                                       std::to_string(world) + " peers");
    }
  }
}

Straggler::Straggler(const std::vector<Slowdown>& all, int rank, double steps_per_epoch) {
  for (const Slowdown& s : all) {
    if (s.rank != rank) continue;
    const double step = s.in_epochs ? s.at * steps_per_epoch : s.at;
    mine_.push_back({s, static_cast<long long>(std::ceil(step - 1e-9))});
  }
  std::stable_sort(mine_.begin(), mine_.end(),
                   [](const Entry& a, const Entry& b) { return a.from_step < b.from_step; });
}

double Straggler::factor_at(long long t) const {
  double f = 1;
  for (const Entry& e : mine_) {
    if (e.s.every == 0 && e.from_step <= t) f = e.s.factor;
  }
  return f;
}

std::chrono::nanoseconds Straggler::extra(long long t, std::chrono::nanoseconds worked) const {
  const double f = factor_at(t);
  auto out = std::chrono::nanoseconds(
      std::llround((f - 1) * static_cast<double>(std::max<long long>(0, worked.count()))));
  for (const Entry& e : mine_) {
    if (e.s.every > 0 && t > 0 && t % e.s.every == 0) out += e.s.stall;
  }
  return out;
}

void Straggler::stretch(long long t, std::chrono::nanoseconds worked) const {
  const std::chrono::nanoseconds pause = extra(t, worked);
  if (pause.count() > 0) std::this_thread::sleep_for(pause);
}

}  // namespace dpg::train
