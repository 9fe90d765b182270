// Counter-based random words for integer noise drawn value by value (dp/skellam.h's Skellam, dp/
// discrete_gaussian.h's discrete Gaussian): ChaCha20's keystream (OpenSSL's libcrypto) under a
// dp::NoiseKey, laid out so that the words of value x depend on (key, stream, x) alone. Noising a
// buffer range by range therefore gives bit for bit what noising it whole gives, whatever the
// rejection samplers consumed for the other values.
//
// Layout, for a sampler that reserves `blocks` 64-byte blocks (8 words each) per value:
// - value x owns blocks [x * blocks, (x + 1) * blocks) of ChaCha20(key, nonce (stream, tags.main));
// - should it need more words than those, they go on in a sub-stream of its own: ChaCha20 under the
//   sub-key K' (the first 32 bytes of ChaCha20(key, nonce (stream, tags.subkey))) with the nonce
//   (x, tags.overflow), blocks 0, 1, 2, ...
// Each sampler uses its own three tags (nonce word 3), so two samplers under one (key, stream)
// never read the same keystream. The tags in use: Skellam 1, 2, 3; discrete Gaussian 4, 5, 6.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "dp/secure_noise.h"

namespace dpg::dp {

struct StreamTags {
  std::uint32_t main, subkey, overflow;
};

namespace detail {
class Overflow;  // a stream's per-value sub-streams (value_stream.cc)
}

// The words of one value: its reserved blocks, then its overflow sub-stream.
class ValueWords {
 public:
  std::uint64_t next() {
    if (left_ == 0) refill();
    --left_;
    return *p_++;
  }

 private:
  friend void for_each_value(const NoiseKey&, std::uint64_t, StreamTags, std::size_t,
                             std::size_t, std::size_t, const char*,
                             const std::function<void(std::size_t, ValueWords&)>&);
  void refill();  // the next block of the overflow sub-stream
  const std::uint64_t* p_ = nullptr;
  std::size_t left_ = 0;
  std::uint64_t x_ = 0;
  std::uint32_t next_block_ = 0;
  detail::Overflow* overflow_ = nullptr;
  std::uint64_t buf_[8];
};

// Calls draw(i, words) for i = 0 .. n - 1, with the words of value first + i (`blocks` a power of
// two, at most 256). `what` names the noise in errors. Throws invalid_argument when the range
// passes the 32-bit block counter ((first + n) * blocks > 2^32) and dpg::Error(internal) if
// libcrypto fails. The keystream buffers are wiped before it returns.
void for_each_value(const NoiseKey& key, std::uint64_t stream, StreamTags tags,
                    std::size_t blocks, std::size_t first, std::size_t n, const char* what,
                    const std::function<void(std::size_t, ValueWords&)>& draw);

}  // namespace dpg::dp
