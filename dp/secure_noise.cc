#include "dp/secure_noise.h"

#include <openssl/evp.h>
#include <sys/random.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <numbers>
#include <string>

#include "runtime/core/error.h"

namespace dpg::dp {
namespace {

constexpr std::size_t kPerBlock = 8;         // uniforms (and outputs) per 64-byte ChaCha20 block
constexpr std::size_t kChunkBlocks = 64;     // keystream made 4 KiB at a time
constexpr std::uint64_t kMaxBlocks = 1ULL << 32;  // ChaCha20's 32-bit block counter

struct CtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};

inline double uniform53(std::uint64_t w) {  // in (0, 1), never 0: log stays finite
  return (static_cast<double>(w >> 11) + 0.5) * 0x1.0p-53;
}

}  // namespace

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

void add_gaussian_secure(std::span<float> out, double stddev, const NoiseKey& key,
                         std::uint64_t stream, float scale, std::size_t first) {
  const std::size_t n = out.size();
  if (n == 0) return;
  const std::size_t end = first + n;
  const std::uint64_t block0 = first / kPerBlock;
  const std::uint64_t blocks = (end + kPerBlock - 1) / kPerBlock - block0;
  if (end < first || block0 + blocks > kMaxBlocks) {
    fail(Code::invalid_argument, "secure noise: a range ending at value " + std::to_string(end) +
                                     " passes ChaCha20's counter (2^35 values)");
  }
  // IV: the 32-bit little-endian block counter, then the 96-bit nonce (stream, then zeros).
  unsigned char iv[16] = {};
  for (int i = 0; i < 4; ++i) iv[i] = static_cast<unsigned char>(block0 >> (8 * i));
  for (int i = 0; i < 8; ++i) iv[4 + i] = static_cast<unsigned char>(stream >> (8 * i));
  std::unique_ptr<EVP_CIPHER_CTX, CtxFree> ctx(EVP_CIPHER_CTX_new());
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_chacha20(), nullptr, key.bytes.data(), iv) != 1) {
    fail(Code::internal, "secure noise: ChaCha20 could not be set up (libcrypto)");
  }
  // The keystream is ChaCha20 applied to zeros.
  static const unsigned char zeros[kChunkBlocks * 64] = {};
  alignas(64) std::uint64_t words[kChunkBlocks * kPerBlock];
  for (std::uint64_t b = 0; b < blocks; b += kChunkBlocks) {
    const std::size_t count = static_cast<std::size_t>(std::min<std::uint64_t>(kChunkBlocks, blocks - b));
    int len = 0;
    if (EVP_EncryptUpdate(ctx.get(), reinterpret_cast<unsigned char*>(words), &len, zeros,
                          static_cast<int>(count * 64)) != 1 ||
        len != static_cast<int>(count * 64)) {
      fail(Code::internal, "secure noise: ChaCha20 keystream failed (libcrypto)");
    }
    for (std::size_t k = 0; k < count * kPerBlock; k += 2) {
      // Output i = (block0 + b) * 8 + k takes the cosine, i + 1 the sine of one pair.
      const std::size_t i = static_cast<std::size_t>((block0 + b) * kPerBlock) + k;
      if (i + 1 < first || i >= end) continue;
      const double r = stddev * std::sqrt(-2.0 * std::log(uniform53(words[k])));
      const double theta = 2.0 * std::numbers::pi * uniform53(words[k + 1]);
      if (i >= first) {
        float& o = out[i - first];
        o = (o + static_cast<float>(r * std::cos(theta))) * scale;
      }
      if (i + 1 >= first && i + 1 < end) {
        float& o = out[i + 1 - first];
        o = (o + static_cast<float>(r * std::sin(theta))) * scale;
      }
    }
  }
}

}  // namespace dpg::dp
