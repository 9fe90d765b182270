// A numeric range of a setting, each end closed or open, and the words of its rule: the config
// table's fields (train_config.cc) and the commands' option tables (apps/option_table.h) check
// their numbers with it, so "must be in (0, 3600], got 0" reads the same everywhere.
#pragma once

#include <charconv>
#include <cmath>
#include <limits>
#include <string>

namespace dpg {

// The shortest text that reads back as the same double: 1, 0.995, 1e-05, 1e+300, nan.
inline std::string number_text(double v) {
  if (v == std::trunc(v) && std::abs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

struct Range {
  static constexpr double inf = std::numeric_limits<double>::infinity();
  double lo = -inf, hi = inf;
  bool lo_open = false, hi_open = false;

  bool contains(double v) const {  // never an infinity or a NaN, whatever the ends
    return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
  // "must be in (0, 3600]", "must be at least 1 and finite" (an integer is always finite, so
  // `integral` drops the "and finite").
  std::string rule(bool integral = false) const {
    const std::string finite = integral ? "" : " and finite";
    if (hi == inf) {
      if (lo == 0) return (lo_open ? "must be positive" : "must be non-negative") + finite;
      return (lo_open ? "must be greater than " : "must be at least ") + number_text(lo) + finite;
    }
    return std::string("must be in ") + (lo_open ? "(" : "[") + number_text(lo) + ", " +
           number_text(hi) + (hi_open ? ")" : "]");
  }
};
inline Range at_least(double lo) { return {lo, Range::inf}; }
inline Range positive() { return {0, Range::inf, true}; }
inline Range between(double lo, double hi) { return {lo, hi}; }         // [lo, hi]
inline Range positive_up_to(double hi) { return {0, hi, true, false}; }  // (0, hi]
inline Range below_one() { return {0, 1, false, true}; }                // [0, 1)
inline Range probability() { return {0, 1, true, true}; }               // (0, 1)

}  // namespace dpg
