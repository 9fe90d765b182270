#include "dp/value_stream.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <memory>
#include <string>

#include "runtime/core/error.h"

namespace dpg::dp {
namespace {

constexpr std::size_t kWordsPerBlock = 8;       // 64-bit words in a 64-byte ChaCha20 block
constexpr std::size_t kChunkBytes = 16 * 1024;  // keystream made 16 KiB at a time
constexpr std::uint64_t kMaxBlocks = 1ULL << 32;  // ChaCha20's 32-bit block counter

struct CtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using Ctx = std::unique_ptr<EVP_CIPHER_CTX, CtxFree>;

// IV as OpenSSL's EVP_chacha20 takes it: the 32-bit little-endian block counter, then the 96-bit
// nonce (a 64-bit word, then a 32-bit tag, both little-endian).
std::array<unsigned char, 16> make_iv(std::uint32_t counter, std::uint64_t word,
                                      std::uint32_t tag) {
  std::array<unsigned char, 16> iv{};
  for (int i = 0; i < 4; ++i) iv[i] = static_cast<unsigned char>(counter >> (8 * i));
  for (int i = 0; i < 8; ++i) iv[4 + i] = static_cast<unsigned char>(word >> (8 * i));
  for (int i = 0; i < 4; ++i) iv[12 + i] = static_cast<unsigned char>(tag >> (8 * i));
  return iv;
}

Ctx chacha(const unsigned char* key, const std::array<unsigned char, 16>& iv, const char* what) {
  Ctx ctx(EVP_CIPHER_CTX_new());
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_chacha20(), nullptr, key, iv.data()) != 1) {
    fail(Code::internal, std::string(what) + ": ChaCha20 could not be set up (libcrypto)");
  }
  return ctx;
}

// `bytes` (at most kChunkBytes) bytes of keystream (ChaCha20 applied to zeros) into out.
void keystream(EVP_CIPHER_CTX* ctx, void* out, std::size_t bytes, const char* what) {
  static const unsigned char zeros[kChunkBytes] = {};
  int len = 0;
  if (EVP_EncryptUpdate(ctx, static_cast<unsigned char*>(out), &len, zeros,
                        static_cast<int>(bytes)) != 1 ||
      len != static_cast<int>(bytes)) {
    fail(Code::internal, std::string(what) + ": ChaCha20 keystream failed (libcrypto)");
  }
}

}  // namespace

namespace detail {

// Block j of value x's sub-stream is ChaCha20(K', nonce (x, tags.overflow)) block j, with the
// sub-key K' the first 32 bytes of ChaCha20(key, nonce (stream, tags.subkey)). Set up on first use.
class Overflow {
 public:
  Overflow(const NoiseKey& key, std::uint64_t stream, StreamTags tags, const char* what)
      : key_(key), stream_(stream), tags_(tags), what_(what) {}
  Overflow(const Overflow&) = delete;
  Overflow& operator=(const Overflow&) = delete;
  ~Overflow() { OPENSSL_cleanse(subkey_.data(), subkey_.size()); }

  void block(std::uint64_t x, std::uint32_t j, std::uint64_t* out) {
    if (!ctx_) {
      Ctx kdf = chacha(key_.bytes.data(), make_iv(0, stream_, tags_.subkey), what_);
      keystream(kdf.get(), subkey_.data(), subkey_.size(), what_);
      ctx_ = chacha(subkey_.data(), make_iv(0, 0, tags_.overflow), what_);
    }
    const auto iv = make_iv(j, x, tags_.overflow);
    if (EVP_EncryptInit_ex(ctx_.get(), nullptr, nullptr, subkey_.data(), iv.data()) != 1) {
      fail(Code::internal, std::string(what_) + ": ChaCha20 could not be set up (libcrypto)");
    }
    keystream(ctx_.get(), out, 64, what_);
  }

 private:
  const NoiseKey& key_;
  std::uint64_t stream_;
  StreamTags tags_;
  const char* what_;
  std::array<unsigned char, 32> subkey_{};
  Ctx ctx_;
};

}  // namespace detail

void ValueWords::refill() {
  overflow_->block(x_, next_block_++, buf_);
  p_ = buf_;
  left_ = kWordsPerBlock;
}

void for_each_value(const NoiseKey& key, std::uint64_t stream, StreamTags tags,
                    std::size_t blocks, std::size_t first, std::size_t n, const char* what,
                    const std::function<void(std::size_t, ValueWords&)>& draw) {
  if (n == 0) return;
  if (!std::has_single_bit(blocks) || blocks * 64 > kChunkBytes) {
    fail(Code::internal, std::string(what) + ": " + std::to_string(blocks) + " blocks per value");
  }
  const std::uint64_t end = static_cast<std::uint64_t>(first) + n;
  if (end < first || end > kMaxBlocks / blocks) {
    fail(Code::invalid_argument,
         std::string(what) + ": a range ending at value " + std::to_string(end) +
             " passes ChaCha20's counter (2^" + std::to_string(32 - std::countr_zero(blocks)) +
             " values)");
  }
  detail::Overflow overflow(key, stream, tags, what);
  Ctx ctx = chacha(key.bytes.data(),
                   make_iv(static_cast<std::uint32_t>(first * blocks), stream, tags.main), what);
  const std::size_t per_chunk = kChunkBytes / (blocks * 64);
  const std::size_t value_words = blocks * kWordsPerBlock;
  alignas(64) std::uint64_t words[kChunkBytes / 8];
  ValueWords w;
  w.overflow_ = &overflow;
  for (std::size_t done = 0; done < n; done += per_chunk) {
    const std::size_t count = std::min(per_chunk, n - done);
    keystream(ctx.get(), words, count * blocks * 64, what);
    for (std::size_t k = 0; k < count; ++k) {
      w.p_ = words + k * value_words;
      w.left_ = value_words;
      w.x_ = static_cast<std::uint64_t>(first) + done + k;
      w.next_block_ = 0;
      draw(done + k, w);
    }
  }
  OPENSSL_cleanse(words, sizeof words);
  OPENSSL_cleanse(w.buf_, sizeof w.buf_);
}

}  // namespace dpg::dp
