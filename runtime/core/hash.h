// A stable 64-bit hash (FNV-1a) for values that peers compare: the same on every build and
// machine, unlike std::hash.
#pragma once

#include <cstdint>
#include <string_view>

namespace dpg {

inline std::uint64_t fnv1a64(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : bytes) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

}  // namespace dpg
