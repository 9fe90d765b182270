// Who may join: the peers of a run share a cluster secret, and every connection proves knowledge
// of it in both directions before any model data flows (docs/SECURITY.md).
//
// The exchange, on a connection the higher rank (the connector) opened to the lower (the
// acceptor), in frames of runtime/net/frame.h:
//
//   connector -> acceptor   hello, challenge (its mode and a fresh 32-byte nonce)
//   acceptor -> connector   hello, challenge, proof (HMAC of the transcript, acceptor's role)
//   connector -> acceptor   proof (HMAC of the transcript, connector's role)
//
// A proof is HMAC-SHA256 keyed by the secret over a label, the prover's role, both hellos as
// sent (so both ranks, the world size and the config hash) and both nonces. The nonces are fresh
// per connection, so a recorded proof is useless on another connection; the role keeps one side's
// proof from being reflected back as the other's; the ranks bind the claimed identities. Without
// a secret the challenges are still exchanged (so that a peer with one and a peer without can say
// so) and no proofs are sent.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/net/frame.h"

namespace dpg::net {

inline constexpr std::size_t kNonceBytes = 32;
// Shorter secrets are refused: a transcript and its proof are a test for guesses offline.
inline constexpr std::size_t kMinSecretBytes = 16;

enum class AuthMode : uint32_t { none = 0, hmac_sha256 = 1 };
const char* to_string(AuthMode mode);

using Nonce = std::array<std::byte, kNonceBytes>;
using Proof = std::array<std::byte, kProofBytes>;
using ChallengeBytes = std::array<std::byte, kChallengeBytes>;

struct Challenge {
  AuthMode mode = AuthMode::none;
  Nonce nonce{};
};

void encode_challenge(const Challenge& c, ChallengeBytes& out);
// Empty for an unknown mode or a non-zero reserved field; `why` says which.
std::optional<Challenge> decode_challenge(const ChallengeBytes& in, std::string& why);

// A fresh nonce from OpenSSL's generator (RAND_bytes); throws `internal` when it fails.
Nonce fresh_nonce();
// A new random cluster secret: 32 bytes from RAND_bytes as 64 hex digits.
std::string random_secret();

enum class Role : uint8_t { connector = 1, acceptor = 2 };  // whose proof

// What both ends of one connection have seen, in the same order on both.
struct Transcript {
  HelloBytes connector_hello{}, acceptor_hello{};
  Nonce connector_nonce{}, acceptor_nonce{};
};

Proof make_proof(std::string_view secret, Role prover, const Transcript& t);
// Compares in constant time (CRYPTO_memcmp), so the time taken says nothing about the bytes.
bool proof_valid(std::string_view secret, Role prover, const Transcript& t, const Proof& got);

}  // namespace dpg::net
