#include "dp/secagg.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "runtime/core/error.h"

namespace dpg::dp {
namespace {

constexpr std::size_t kKeyBytes = 32;              // X25519 keys and secrets, ChaCha20 keys
constexpr std::size_t kWordsPerBlock = 16;         // 32-bit words per 64-byte ChaCha20 block
constexpr std::size_t kChunkBlocks = 64;           // keystream made 4 KiB at a time
constexpr std::uint64_t kMaxBlocks = 1ULL << 32;   // ChaCha20's 32-bit block counter
// Domain separation: a key derived here is for nothing else, and a later format gets a new label.
constexpr char kLabel[] = "dpgossip secure aggregation pair key v1";

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* c) const { EVP_PKEY_CTX_free(c); }
};
struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using PkeyCtx = std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree>;

// Zeroes a secret on every way out of a scope.
struct Cleanse {
  unsigned char* p;
  std::size_t n;
  ~Cleanse() { OPENSSL_cleanse(p, n); }
};

void put_le(std::vector<unsigned char>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

[[noreturn]] void invalid_peer_key(int peer, const std::string& why) {
  ERR_clear_error();  // libcrypto's queue is this thread's; leave nothing in it for others
  fail(Code::data_loss, "peer " + std::to_string(peer) +
                            " sent an invalid secure-aggregation public key (" + why + ")");
}

[[noreturn]] void libcrypto_failed(const std::string& what) {
  ERR_clear_error();
  fail(Code::internal, "secure aggregation: " + what + " failed (libcrypto)");
}

}  // namespace

SecAggKeyPair SecAggKeyPair::generate() {
  PkeyCtx ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, nullptr));
  EVP_PKEY* pkey = nullptr;
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 || EVP_PKEY_keygen(ctx.get(), &pkey) != 1 ||
      pkey == nullptr) {
    EVP_PKEY_free(pkey);
    ERR_clear_error();
    fail(Code::unavailable, "secure aggregation: libcrypto could not generate an X25519 key pair");
  }
  return SecAggKeyPair(pkey);
}

std::array<unsigned char, 32> SecAggKeyPair::public_key() const {
  if (pkey_ == nullptr) {
    fail(Code::failed_precondition, "secure aggregation: public_key of a moved-from key pair");
  }
  std::array<unsigned char, 32> out{};
  std::size_t len = out.size();
  if (EVP_PKEY_get_raw_public_key(pkey_, out.data(), &len) != 1 || len != out.size()) {
    libcrypto_failed("reading the X25519 public key");
  }
  return out;
}

SecAggKeyPair::SecAggKeyPair(SecAggKeyPair&& other) noexcept
    : pkey_(std::exchange(other.pkey_, nullptr)) {}

SecAggKeyPair& SecAggKeyPair::operator=(SecAggKeyPair&& other) noexcept {
  if (this != &other) {
    EVP_PKEY_free(pkey_);
    pkey_ = std::exchange(other.pkey_, nullptr);
  }
  return *this;
}

SecAggKeyPair::~SecAggKeyPair() { EVP_PKEY_free(pkey_); }

PairKey agree_pair_key(const SecAggKeyPair& mine, std::span<const unsigned char> their_public,
                       int my_rank, int their_rank, std::uint64_t context) {
  if (my_rank < 0 || their_rank < 0) {
    fail(Code::invalid_argument, "secure aggregation: negative rank (" + std::to_string(my_rank) +
                                     ", " + std::to_string(their_rank) + ")");
  }
  if (my_rank == their_rank) {
    fail(Code::invalid_argument, "secure aggregation: rank " + std::to_string(my_rank) +
                                     " cannot agree a pair key with itself");
  }
  if (mine.pkey_ == nullptr) {
    fail(Code::failed_precondition, "secure aggregation: agree_pair_key with a moved-from key pair");
  }
  if (their_public.size() != kKeyBytes) {
    invalid_peer_key(their_rank, std::to_string(their_public.size()) + " bytes, not 32");
  }

  // X25519. Every 32-byte string decodes to some u-coordinate (RFC 7748 masks the top bit), but
  // those of the points of small order give an all-zero secret: libcrypto refuses them in the
  // derive, and the explicit check below keeps that guarantee whatever the library version.
  std::unique_ptr<EVP_PKEY, PkeyFree> peer(
      EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, their_public.data(), kKeyBytes));
  if (!peer) invalid_peer_key(their_rank, "not an X25519 key");
  unsigned char secret[kKeyBytes];
  Cleanse wipe_secret{secret, sizeof secret};
  {
    PkeyCtx ctx(EVP_PKEY_CTX_new(mine.pkey_, nullptr));
    if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1) libcrypto_failed("X25519 set-up");
    if (EVP_PKEY_derive_set_peer(ctx.get(), peer.get()) != 1) {
      invalid_peer_key(their_rank, "refused by X25519");
    }
    std::size_t len = sizeof secret;
    if (EVP_PKEY_derive(ctx.get(), secret, &len) != 1) {
      invalid_peer_key(their_rank, "a point of small order");
    }
    if (len != sizeof secret) libcrypto_failed("X25519");
  }
  static const unsigned char zeros[kKeyBytes] = {};
  if (CRYPTO_memcmp(secret, zeros, kKeyBytes) == 0) {
    invalid_peer_key(their_rank, "a point of small order");
  }

  // HKDF-SHA256. Salt: the label and the run's context. Info: the two ranks in ascending order
  // and their public keys in the same order, so both ends feed the same bytes and a key is bound
  // to its pair, its run and the very keys exchanged.
  const auto my_public = mine.public_key();
  const bool me_first = my_rank < their_rank;
  std::vector<unsigned char> salt(kLabel, kLabel + sizeof kLabel - 1);
  put_le(salt, context, 8);
  std::vector<unsigned char> info(kLabel, kLabel + sizeof kLabel - 1);
  put_le(info, static_cast<std::uint64_t>(std::min(my_rank, their_rank)), 4);
  put_le(info, static_cast<std::uint64_t>(std::max(my_rank, their_rank)), 4);
  const std::span<const unsigned char> first_key =
      me_first ? std::span<const unsigned char>(my_public) : their_public;
  const std::span<const unsigned char> second_key =
      me_first ? their_public : std::span<const unsigned char>(my_public);
  info.insert(info.end(), first_key.begin(), first_key.end());
  info.insert(info.end(), second_key.begin(), second_key.end());
  put_le(info, context, 8);

  PairKey key{};
  PkeyCtx kdf(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr));
  std::size_t len = key.size();
  if (!kdf || EVP_PKEY_derive_init(kdf.get()) != 1 ||
      EVP_PKEY_CTX_set_hkdf_md(kdf.get(), EVP_sha256()) != 1 ||
      EVP_PKEY_CTX_set1_hkdf_salt(kdf.get(), salt.data(), static_cast<int>(salt.size())) != 1 ||
      EVP_PKEY_CTX_set1_hkdf_key(kdf.get(), secret, static_cast<int>(sizeof secret)) != 1 ||
      EVP_PKEY_CTX_add1_hkdf_info(kdf.get(), info.data(), static_cast<int>(info.size())) != 1 ||
      EVP_PKEY_derive(kdf.get(), key.data(), &len) != 1 || len != key.size()) {
    libcrypto_failed("HKDF-SHA256");
  }
  return key;
}

void add_pair_mask(std::span<std::uint32_t> v, const PairKey& key, std::uint64_t step,
                   bool subtract, std::size_t first) {
  const std::size_t n = v.size();
  if (n == 0) return;
  const std::size_t end = first + n;
  const std::uint64_t block0 = first / kWordsPerBlock;
  const std::uint64_t blocks = (end + kWordsPerBlock - 1) / kWordsPerBlock - block0;
  if (end < first || block0 + blocks > kMaxBlocks) {
    fail(Code::invalid_argument, "secure aggregation: a mask range ending at word " +
                                     std::to_string(end) +
                                     " passes ChaCha20's counter (2^36 words)");
  }
  // IV: the 32-bit little-endian block counter, then the 96-bit nonce (step, then zeros), under
  // the pair's own key.
  unsigned char iv[16] = {};
  for (int i = 0; i < 4; ++i) iv[i] = static_cast<unsigned char>(block0 >> (8 * i));
  for (int i = 0; i < 8; ++i) iv[4 + i] = static_cast<unsigned char>(step >> (8 * i));
  std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree> ctx(EVP_CIPHER_CTX_new());
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_chacha20(), nullptr, key.data(), iv) != 1) {
    libcrypto_failed("ChaCha20 set-up");
  }
  // The keystream is ChaCha20 applied to zeros; the mask is secret, so its buffer is wiped.
  static const unsigned char zeros[kChunkBlocks * 64] = {};
  alignas(64) unsigned char stream[kChunkBlocks * 64];
  Cleanse wipe_stream{stream, sizeof stream};
  std::size_t skip = first % kWordsPerBlock;  // words of the first block before `first`
  std::size_t done = 0;
  for (std::uint64_t b = 0; b < blocks; b += kChunkBlocks) {
    const std::size_t count =
        static_cast<std::size_t>(std::min<std::uint64_t>(kChunkBlocks, blocks - b));
    int len = 0;
    if (EVP_EncryptUpdate(ctx.get(), stream, &len, zeros, static_cast<int>(count * 64)) != 1 ||
        len != static_cast<int>(count * 64)) {
      libcrypto_failed("ChaCha20 keystream");
    }
    const std::size_t stop = std::min(count * kWordsPerBlock, skip + (n - done));
    std::uint32_t* out = v.data() + done;  // out[j - skip] takes word j of this chunk
    for (std::size_t j = skip; j < stop; ++j) {
      const unsigned char* p = stream + 4 * j;
      const std::uint32_t w = static_cast<std::uint32_t>(p[0]) |
                              static_cast<std::uint32_t>(p[1]) << 8 |
                              static_cast<std::uint32_t>(p[2]) << 16 |
                              static_cast<std::uint32_t>(p[3]) << 24;
      // Unsigned arithmetic: wraps modulo 2^32.
      std::uint32_t& o = out[j - skip];
      o = subtract ? o - w : o + w;
    }
    done += stop - skip;
    skip = 0;
  }
}

PairwiseMasker::PairwiseMasker(int rank, std::vector<std::optional<PairKey>> keys)
    : rank_(rank), keys_(std::move(keys)) {
  const int n = static_cast<int>(keys_.size());
  if (rank_ < 0 || rank_ >= n) {
    fail(Code::invalid_argument, "secure aggregation: rank " + std::to_string(rank_) +
                                     " outside a world of " + std::to_string(n) + " pair keys");
  }
  for (int p = 0; p < n; ++p) {
    if (p == rank_ && keys_[p]) {
      fail(Code::invalid_argument, "secure aggregation: rank " + std::to_string(rank_) +
                                       " was given a pair key with itself");
    }
    // A missing key would leave that pair unmasked and the peer's mask uncancelled.
    if (p != rank_ && !keys_[p]) {
      fail(Code::invalid_argument, "secure aggregation: rank " + std::to_string(rank_) +
                                       " has no pair key with peer " + std::to_string(p));
    }
  }
}

void PairwiseMasker::mask(std::span<std::uint32_t> v, std::uint64_t step) const {
  for (int p = 0; p < world(); ++p) {
    if (p != rank_) add_pair_mask(v, *keys_[p], step, /*subtract=*/rank_ > p);
  }
}

}  // namespace dpg::dp
