// What the dp tests share: the message of the invalid_argument error a call throws.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "runtime/core/error.h"

namespace dpg::testing {

// The message of the dpg::Error(invalid_argument) that `f()` throws; fails the test otherwise.
template <class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::invalid_argument);
    return e.what();
  }
  FAIL("expected a dpg::Error");
  return "";
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace dpg::testing
