// Secret randomness from the operating system: getrandom(2), which blocks only until the kernel's
// pool is first ready. Every secret of a run (the noise and sampler seed, secure noise's ChaCha20
// key) and every value that must not repeat between runs (a run id, a shared-memory probe) comes
// from here. Not std::random_device: libstdc++'s reads the CPU's RDRAND where it exists, not the
// OS (tools/check_map.py's entropy check refuses it in the sources).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace dpg {

// Fills `out` from getrandom(2). Throws unavailable, naming `what` (the value drawn) and the
// system's error, when the OS gives none.
void os_random(std::span<std::byte> out, const char* what);
std::uint64_t os_random_u64(const char* what);

}  // namespace dpg
