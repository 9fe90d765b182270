#include "runtime/core/os_random.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "runtime/core/error.h"

namespace dpg {

void os_random(std::span<std::byte> out, const char* what) {
  std::size_t got = 0;
  for (int tries = 0; got < out.size() && tries < 100; ++tries) {
    const ssize_t n = ::getrandom(out.data() + got, out.size() - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      fail(Code::unavailable,
           std::string(what) + ": getrandom(2) failed: " + std::strerror(errno));
    }
  }
  if (got < out.size()) {
    fail(Code::unavailable, std::string(what) + ": getrandom(2) gave too few bytes");
  }
}

std::uint64_t os_random_u64(const char* what) {
  std::uint64_t v = 0;
  os_random(std::as_writable_bytes(std::span(&v, 1)), what);
  return v;
}

}  // namespace dpg
