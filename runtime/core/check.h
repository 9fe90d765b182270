// Invariant checks that throw dpg::Error(Code::internal) with the file, the line and both values.
#pragma once

#include <sstream>

#include "runtime/core/error.h"

#define DPG_CHECK(cond)                                                                  \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::ostringstream dpg_check_os_;                                                  \
      dpg_check_os_ << __FILE__ << ":" << __LINE__ << ": check failed: " #cond;          \
      ::dpg::fail(::dpg::Code::internal, dpg_check_os_.str());                           \
    }                                                                                    \
  } while (0)

#define DPG_CHECK_OP_(a, b, op)                                                          \
  do {                                                                                   \
    const auto& dpg_a_ = (a);                                                            \
    const auto& dpg_b_ = (b);                                                            \
    if (!(dpg_a_ op dpg_b_)) {                                                           \
      std::ostringstream dpg_check_os_;                                                  \
      dpg_check_os_ << __FILE__ << ":" << __LINE__ << ": check failed: " #a " " #op " " #b \
                    << " (" << dpg_a_ << " vs " << dpg_b_ << ")";                        \
      ::dpg::fail(::dpg::Code::internal, dpg_check_os_.str());                           \
    }                                                                                    \
  } while (0)

#define DPG_CHECK_EQ(a, b) DPG_CHECK_OP_(a, b, ==)
#define DPG_CHECK_NE(a, b) DPG_CHECK_OP_(a, b, !=)
#define DPG_CHECK_LE(a, b) DPG_CHECK_OP_(a, b, <=)
#define DPG_CHECK_LT(a, b) DPG_CHECK_OP_(a, b, <)
#define DPG_CHECK_GE(a, b) DPG_CHECK_OP_(a, b, >=)
