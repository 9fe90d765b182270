#include "dp/secure_noise.h"

#include <span>

#include "runtime/core/os_random.h"

namespace dpg::dp {

NoiseKey NoiseKey::from_os() {
  NoiseKey k;
  os_random(std::as_writable_bytes(std::span(k.bytes)), "secure noise");
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
