#include "runtime/core/bounds.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "runtime/core/error.h"

namespace dpg {

std::uint64_t product_or_fail(std::initializer_list<std::uint64_t> factors, const std::string& where,
                              const std::string& field) {
  std::uint64_t p = 1;
  bool overflow = false;
  std::string shown;
  for (std::uint64_t f : factors) {
    shown += (shown.empty() ? "" : " x ") + std::to_string(f);
    if (overflow) continue;
    const auto next = checked_mul(p, f);
    if (next) p = *next;
    else overflow = true;
  }
  if (overflow) {
    fail(Code::data_loss, where + ": " + field + " overflows 64 bits (" + shown +
                              "): a corrupt or hostile header");
  }
  return p;
}

std::uint64_t sum_or_fail(std::uint64_t a, std::uint64_t b, const std::string& where,
                          const std::string& field) {
  const auto s = checked_add(a, b);
  if (!s) {
    fail(Code::data_loss, where + ": " + field + " overflows 64 bits (" + std::to_string(a) +
                              " + " + std::to_string(b) + "): a corrupt or hostile header");
  }
  return *s;
}

std::uint64_t available_memory_bytes() {
  if (const char* env = std::getenv("DPGOSSIP_MEMORY_BYTES"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(env, &end, 10);
    if (end != env && *end == '\0') return v;
  }
  std::ifstream in("/proc/meminfo");
  std::string key;
  unsigned long long kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return static_cast<std::uint64_t>(kib) * 1024;
  }
  const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
  return UINT64_MAX;  // unknown: do not refuse
}

std::string bytes_text(std::uint64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f TiB", b / (1024.0 * 1024 * 1024 * 1024));
  else if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f GiB", b / (1024.0 * 1024 * 1024));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  return std::to_string(bytes) + " bytes (" + buf + ")";
}

std::string fixed_text(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

void require_memory(std::uint64_t bytes, const std::string& what, const std::string& hint) {
  const std::uint64_t have = available_memory_bytes();
  if (bytes <= have) return;
  fail(Code::failed_precondition, what + " needs about " + bytes_text(bytes) +
                                      "; this machine has " + bytes_text(have) + " available" +
                                      (hint.empty() ? "" : " (" + hint + ")"));
}

std::string shorten(std::string_view text, std::size_t max_chars) {
  if (text.size() <= max_chars) return std::string(text);
  return std::string(text.substr(0, max_chars)) + "... (" + std::to_string(text.size()) +
         " characters)";
}

}  // namespace dpg
