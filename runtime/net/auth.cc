#include "runtime/net/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>
#include <vector>

#include "runtime/core/error.h"

namespace dpg::net {
namespace {

constexpr char kLabel[] = "dpgossip auth v1";

uint32_t get_u32(const ChallengeBytes& b, std::size_t at) {
  uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v |= uint32_t{std::to_integer<uint8_t>(b[at + i])} << (8 * i);
  return v;
}

void put_u32(ChallengeBytes& b, std::size_t at, uint32_t v) {
  for (std::size_t i = 0; i < 4; ++i) b[at + i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

void random_bytes(std::byte* out, std::size_t n) {
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out), static_cast<int>(n)) != 1) {
    fail(Code::internal, "OpenSSL's random generator (RAND_bytes) failed");
  }
}

}  // namespace

const char* to_string(AuthMode mode) {
  return mode == AuthMode::hmac_sha256 ? "HMAC-SHA256 with a cluster secret" : "no secret";
}

void encode_challenge(const Challenge& c, ChallengeBytes& out) {
  out.fill(std::byte{0});
  put_u32(out, 0, static_cast<uint32_t>(c.mode));
  std::memcpy(out.data() + 8, c.nonce.data(), kNonceBytes);
}

std::optional<Challenge> decode_challenge(const ChallengeBytes& in, std::string& why) {
  const uint32_t mode = get_u32(in, 0);
  if (mode > 1) {
    why = "challenge of unknown mode " + std::to_string(mode);
    return std::nullopt;
  }
  if (get_u32(in, 4) != 0) {
    why = "challenge with a non-zero reserved field";
    return std::nullopt;
  }
  Challenge c;
  c.mode = static_cast<AuthMode>(mode);
  std::memcpy(c.nonce.data(), in.data() + 8, kNonceBytes);
  return c;
}

Nonce fresh_nonce() {
  Nonce n;
  random_bytes(n.data(), n.size());
  return n;
}

std::string random_secret() {
  std::array<std::byte, 32> raw;
  random_bytes(raw.data(), raw.size());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (std::byte b : raw) {
    s += kHex[std::to_integer<uint8_t>(b) >> 4];
    s += kHex[std::to_integer<uint8_t>(b) & 0xf];
  }
  return s;
}

Proof make_proof(std::string_view secret, Role prover, const Transcript& t) {
  std::vector<unsigned char> msg;
  msg.reserve(sizeof kLabel + 1 + 2 * kHelloBytes + 2 * kNonceBytes);
  auto add = [&msg](const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    msg.insert(msg.end(), b, b + n);
  };
  add(kLabel, sizeof kLabel);  // with its terminating zero
  const auto role = static_cast<unsigned char>(prover);
  add(&role, 1);
  add(t.connector_hello.data(), kHelloBytes);
  add(t.acceptor_hello.data(), kHelloBytes);
  add(t.connector_nonce.data(), kNonceBytes);
  add(t.acceptor_nonce.data(), kNonceBytes);
  Proof out;
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg.data(), msg.size(),
           reinterpret_cast<unsigned char*>(out.data()), &len) == nullptr ||
      len != out.size()) {
    fail(Code::internal, "OpenSSL's HMAC-SHA256 failed");
  }
  return out;
}

bool proof_valid(std::string_view secret, Role prover, const Transcript& t, const Proof& got) {
  const Proof want = make_proof(secret, prover, t);
  return CRYPTO_memcmp(want.data(), got.data(), want.size()) == 0;
}

}  // namespace dpg::net
