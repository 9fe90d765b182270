// Argument checks shared by the accountants (dp/rdp.cc, dp/pld.cc, dp/accountant.cc): each
// throws dpg::Error(Code::invalid_argument) naming the argument and the value it got.
#pragma once

#include <charconv>
#include <cmath>
#include <string>

#include "runtime/core/error.h"

namespace dpg::dp::checks {

// Shortest text that reads back as the same double: 0.05, not 0.050000000000000003.
inline std::string str(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

[[noreturn]] inline void bad_argument(const std::string& message) {
  fail(Code::invalid_argument, message);
}

inline void check_q(double q, const char* name) {
  if (!(q >= 0.0 && q <= 1.0))
    bad_argument(std::string(name) + " (sample rate) must be in [0, 1], got " + str(q));
}

inline void check_sigma(double sigma, const char* name) {
  if (!(sigma > 0.0 && std::isfinite(sigma)))
    bad_argument(std::string(name) + " (noise multiplier) must be finite and > 0, got " +
                 str(sigma));
}

inline void check_delta(double delta, const char* name) {
  if (!(delta > 0.0 && delta < 1.0))
    bad_argument(std::string(name) + " must be in (0, 1), got " + str(delta));
}

inline void check_steps(long long steps, const char* name) {
  if (steps < 0) bad_argument(std::string(name) + " must be >= 0, got " + std::to_string(steps));
}

}  // namespace dpg::dp::checks
