// The handshake's pieces without sockets: challenges, proofs over the transcript, and the frame
// header's checks (checksum, kinds, each kind's length bound).
#include <doctest/doctest.h>
#include <zlib.h>

#include <set>
#include <string>

#include "runtime/net/auth.h"
#include "runtime/net/frame.h"

using namespace dpg::net;

namespace {

const std::string kSecret = "the-cluster-secret-0123456789";

Transcript sample() {
  Transcript t;
  encode_hello(Hello{1, 4, 0xabcdef}, t.connector_hello);
  encode_hello(Hello{0, 4, 0xabcdef}, t.acceptor_hello);
  t.connector_nonce = fresh_nonce();
  t.acceptor_nonce = fresh_nonce();
  return t;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("auth: a proof holds only for its secret, role and transcript") {
  const Transcript t = sample();
  const Proof p = make_proof(kSecret, Role::connector, t);
  CHECK(proof_valid(kSecret, Role::connector, t, p));
  CHECK(make_proof(kSecret, Role::connector, t) == p);  // deterministic

  CHECK_FALSE(proof_valid("another-secret-0123456789", Role::connector, t, p));
  CHECK_FALSE(proof_valid(kSecret, Role::acceptor, t, p));  // no reflection of one side's proof

  auto changed = [&](auto edit) {
    Transcript u = t;
    edit(u);
    return proof_valid(kSecret, Role::connector, u, p);
  };
  // Each rank, the world size, the config hash and each nonce is bound.
  CHECK_FALSE(changed([](Transcript& u) { encode_hello(Hello{2, 4, 0xabcdef}, u.connector_hello); }));
  CHECK_FALSE(changed([](Transcript& u) { encode_hello(Hello{3, 4, 0xabcdef}, u.acceptor_hello); }));
  CHECK_FALSE(changed([](Transcript& u) { encode_hello(Hello{1, 5, 0xabcdef}, u.connector_hello); }));
  CHECK_FALSE(changed([](Transcript& u) { encode_hello(Hello{1, 4, 0xabcdee}, u.connector_hello); }));
  CHECK_FALSE(changed([](Transcript& u) { u.connector_nonce[31] ^= std::byte{1}; }));
  CHECK_FALSE(changed([](Transcript& u) { u.acceptor_nonce[0] ^= std::byte{0x80}; }));
  // The hellos swapped: a connector's proof is not an acceptor's.
  CHECK_FALSE(changed([](Transcript& u) { std::swap(u.connector_hello, u.acceptor_hello); }));

  Proof flipped = p;
  flipped[17] ^= std::byte{4};
  CHECK_FALSE(proof_valid(kSecret, Role::connector, t, flipped));
}

TEST_CASE("auth: the proof is HMAC-SHA256 of the documented message") {
  // A fixed transcript, so that the proof's definition cannot drift unnoticed: the value was
  // computed independently with Python's hmac module over the same bytes.
  Transcript t;
  encode_hello(Hello{1, 2, 0x5eed}, t.connector_hello);
  encode_hello(Hello{0, 2, 0x5eed}, t.acceptor_hello);
  for (std::size_t i = 0; i < kNonceBytes; ++i) {
    t.connector_nonce[i] = std::byte(i);
    t.acceptor_nonce[i] = std::byte(0xff - i);
  }
  const Proof p = make_proof("0123456789abcdef", Role::acceptor, t);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (std::byte b : p) {
    hex += kHex[std::to_integer<int>(b) >> 4];
    hex += kHex[std::to_integer<int>(b) & 15];
  }
  CHECK(hex == "99847d87da6f1bd6447776a7de67359574bbaa92df4d3a74a42b8d2b7085dc48");
}

TEST_CASE("auth: nonces and secrets are fresh") {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const Nonce n = fresh_nonce();
    seen.insert(std::string(reinterpret_cast<const char*>(n.data()), n.size()));
  }
  CHECK(seen.size() == 100);
  const std::string a = random_secret(), b = random_secret();
  CHECK(a.size() == 64);
  CHECK(a != b);
  CHECK(a.size() >= kMinSecretBytes);
}

TEST_CASE("auth: challenges round-trip; unknown modes and reserved bits are refused") {
  Challenge c{AuthMode::hmac_sha256, fresh_nonce()};
  ChallengeBytes b;
  encode_challenge(c, b);
  std::string why;
  const auto back = decode_challenge(b, why);
  REQUIRE(back);
  CHECK(back->mode == AuthMode::hmac_sha256);
  CHECK(back->nonce == c.nonce);

  ChallengeBytes bad = b;
  bad[0] = std::byte{7};
  CHECK_FALSE(decode_challenge(bad, why));
  CHECK(contains(why, "unknown mode 7"));
  bad = b;
  bad[5] = std::byte{1};
  CHECK_FALSE(decode_challenge(bad, why));
  CHECK(contains(why, "reserved"));
}

TEST_CASE("frame: a header round-trips and any changed byte is caught") {
  const FrameHeader h{FrameKind::data, Tag{3, 123456789, 42}, 65536};
  HeaderBytes b;
  encode_header(h, b);
  std::string why;
  const auto back = decode_header(b, why);
  REQUIRE(back);
  CHECK(back->kind == h.kind);
  CHECK(back->tag == h.tag);
  CHECK(back->length == h.length);
  // Every single-bit change anywhere in the header is refused (CRC-32 catches every 1-bit error;
  // the magic and version are checked before it).
  for (std::size_t i = 0; i < kHeaderBytes; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      HeaderBytes c = b;
      c[i] ^= std::byte(1 << bit);
      CHECK_FALSE(decode_header(c, why));
      CHECK_FALSE(why.empty());
    }
  }
  HeaderBytes c = b;
  c[20] ^= std::byte{1};
  CHECK_FALSE(decode_header(c, why));
  CHECK(contains(why, "checksum mismatch"));
}

TEST_CASE("frame: each kind's length is bounded before anything is allocated") {
  std::string why;
  auto refused = [&](FrameKind kind, uint64_t length) {
    HeaderBytes b;
    encode_header(FrameHeader{kind, Tag{}, length}, b);
    return !decode_header(b, why);
  };
  CHECK_FALSE(refused(FrameKind::data, kMaxDataBytes));
  CHECK(refused(FrameKind::data, kMaxDataBytes + 1));
  CHECK(contains(why, "data frame of 1099511627777 bytes; a data frame has at most 1099511627776"));
  CHECK_FALSE(refused(FrameKind::abort, kMaxAbortBytes));
  CHECK(refused(FrameKind::abort, kMaxAbortBytes + 1));
  CHECK(refused(FrameKind::bye, 1));
  CHECK(refused(FrameKind::heartbeat, 8));
  CHECK_FALSE(refused(FrameKind::hello, kHelloBytes));
  CHECK(refused(FrameKind::hello, kHelloBytes + 1));
  CHECK(refused(FrameKind::hello, uint64_t{1} << 62));
  CHECK(contains(why, "a hello frame has exactly 32"));
  CHECK(refused(FrameKind::challenge, 0));
  CHECK(refused(FrameKind::proof, kProofBytes - 1));
  CHECK_FALSE(refused(FrameKind::proof, kProofBytes));
}

TEST_CASE("frame: unknown kinds, old versions and TLS bytes are named") {
  HeaderBytes b;
  encode_header(FrameHeader{FrameKind::data, Tag{}, 4}, b);
  std::string why;
  HeaderBytes c = b;
  c[4] = std::byte{2};  // version 2
  CHECK_FALSE(decode_header(c, why));
  CHECK(contains(why, "wire version 2, this build speaks 3"));
  HeaderBytes tls{};
  tls[0] = std::byte{0x16};
  tls[1] = std::byte{0x03};
  tls[2] = std::byte{0x01};
  CHECK_FALSE(decode_header(tls, why));
  CHECK(contains(why, "TLS handshake"));
  c = b;
  c[6] = std::byte{9};  // kind 9, with a checksum that fits
  const uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(c.data()), 36);
  for (int i = 0; i < 4; ++i) c[36 + i] = std::byte((crc >> (8 * i)) & 0xff);
  CHECK_FALSE(decode_header(c, why));
  CHECK(contains(why, "unknown kind 9"));
  HelloBytes hello{};
  CHECK_FALSE(decode_hello(hello, why));
  CHECK(contains(why, "not a dpgossip hello"));
}
