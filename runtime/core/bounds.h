// Bounds on sizes and costs that come from outside: checked arithmetic for products formed from
// file headers, frames and flags, and a check of an allocation's cost against the memory the
// machine has, so that a number inside an input never decides on its own how much is allocated.
// docs/LIMITS.md lists the limits built on these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace dpg {

// a * b and a + b, or nothing on overflow.
inline std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<std::uint64_t> checked_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The product of `factors`, or throws data_loss "<where>: <field> overflows 64 bits (a x b x
// ...)". `where` names the file (or frame), `field` the header field the product is formed from.
std::uint64_t product_or_fail(std::initializer_list<std::uint64_t> factors, const std::string& where,
                              const std::string& field);
// a + b, or throws data_loss naming `where` and `field`.
std::uint64_t sum_or_fail(std::uint64_t a, std::uint64_t b, const std::string& where,
                          const std::string& field);

// What this machine can still give, in bytes: MemAvailable of /proc/meminfo, else
// sysconf(_SC_AVPHYS_PAGES) * page size. The environment variable DPGOSSIP_MEMORY_BYTES, when
// set, replaces it (for tests and for machines whose cgroup limit /proc does not show).
std::uint64_t available_memory_bytes();

// Throws failed_precondition "<what> needs about N bytes (X MiB); this machine has M bytes
// available (Y MiB)" when `bytes` exceeds the available memory. `hint` ends the message (the
// flag that lowers the cost, or that overrides the check).
void require_memory(std::uint64_t bytes, const std::string& what, const std::string& hint = "");

// "12345678 bytes (11.8 MiB)".
std::string bytes_text(std::uint64_t bytes);
// `v` with `digits` digits after the point ("%.*f"), for tables and reports.
std::string fixed_text(double v, int digits);

// A user-given value quoted in an error, cut to `max_chars` with "..." and its full length.
std::string shorten(std::string_view text, std::size_t max_chars = 40);

}  // namespace dpg
