#include "dp/secure_noise.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "runtime/core/error.h"

namespace dpg::dp {

NoiseKey NoiseKey::from_os() {
  NoiseKey k;
  std::size_t got = 0;
  for (int tries = 0; got < k.bytes.size() && tries < 100; ++tries) {
    const ssize_t n = ::getrandom(k.bytes.data() + got, k.bytes.size() - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      fail(Code::unavailable, std::string("secure noise: getrandom(2) failed: ") +
                                  std::strerror(errno));
    }
  }
  if (got < k.bytes.size()) fail(Code::unavailable, "secure noise: getrandom(2) gave too few bytes");
  return k;
}

NoiseKey NoiseKey::fixed(std::uint64_t value) {
  NoiseKey k;
  for (std::size_t i = 0; i < k.bytes.size(); ++i) {
    k.bytes[i] = static_cast<unsigned char>(value >> (8 * (i % 8)));
  }
  return k;
}

}  // namespace dpg::dp
