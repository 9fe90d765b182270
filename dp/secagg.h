// Pairwise masks for secure aggregation (Bonawitz et al. 2017, without the dropout recovery).
//
// Each pair of peers (i, j) agrees on a 256-bit key over X25519 and expands it with ChaCha20 into
// a mask as long as the vector; the lower rank adds it and the higher rank subtracts it, modulo
// 2^32. In the sum over all peers every pair's mask appears once with each sign and cancels
// exactly, so an exact integer all-reduce (collective::Communicator::allreduce over uint32_t) of
// the masked vectors gives the sum of the unmasked ones, while each masked vector on its own is
// uniform: a peer that sees another's message learns nothing of its value unless it knows all of
// that peer's pair keys. The arithmetic is modulo 2^32 (not float) because only a group makes the
// masks cancel bit for bit and the masked value uniform; callers encode their values as fixed
// point first, with room in 32 bits for the sum over every peer.
//
// Keys: X25519 (OpenSSL's libcrypto, the private key drawn from its generator, which the
// operating system's entropy seeds), then HKDF-SHA256 over the shared secret with the two ranks
// in ascending order, both public keys and the run's `context` (its config hash) in the salt and
// info: both peers derive the same key, and no two pairs, nor two runs, share one. A peer's public
// key of the wrong length, or one of small order (whose shared secret is all zeros, which any
// eavesdropper knows), is refused as data_loss naming that peer.
//
// Masks: word first + i of ChaCha20's keystream under the pair key with nonce = step, so masking
// a vector range by range gives what masking it whole gives. A (key, step) pair must mask one
// vector only: two vectors masked alike reveal their difference. A caller with several masked
// all-reduces per training step gives each its own nonce (say step * buckets + bucket).
//
// What this does not do: a peer that drops out leaves its masks in the sum (no secret-shared
// recovery), and the public keys must reach the peers authentically (the transport's job): a
// man in the middle could swap them. Pure: no I/O beyond the generator, no threads, no transport.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

struct evp_pkey_st;  // OpenSSL's EVP_PKEY, kept out of this header

namespace dpg::dp {

using PairKey = std::array<unsigned char, 32>;

// An X25519 key pair. Move-only: the private key lives in OpenSSL's EVP_PKEY, freed here.
struct SecAggKeyPair {
  // A fresh key pair from OpenSSL's generator. Throws dpg::Error(unavailable) if libcrypto cannot
  // make one (no entropy).
  static SecAggKeyPair generate();
  // The 32-byte X25519 public key (RFC 7748's u-coordinate, little-endian), to send to the peers.
  // Throws dpg::Error(failed_precondition) on a moved-from pair.
  std::array<unsigned char, 32> public_key() const;

  SecAggKeyPair(SecAggKeyPair&& other) noexcept;
  SecAggKeyPair& operator=(SecAggKeyPair&& other) noexcept;
  SecAggKeyPair(const SecAggKeyPair&) = delete;
  SecAggKeyPair& operator=(const SecAggKeyPair&) = delete;
  ~SecAggKeyPair();

 private:
  friend PairKey agree_pair_key(const SecAggKeyPair&, std::span<const unsigned char>, int, int,
                                std::uint64_t);
  explicit SecAggKeyPair(evp_pkey_st* pkey) : pkey_(pkey) {}
  evp_pkey_st* pkey_ = nullptr;  // null once moved from
};

// The key rank `my_rank` shares with `their_rank`: X25519 of `mine` and `their_public`, then
// HKDF-SHA256 binding min(rank), max(rank), both public keys and `context`. Both peers get the
// same key. Throws dpg::Error(data_loss) naming the peer when `their_public` is not 32 bytes or
// gives an all-zero shared secret; invalid_argument for negative or equal ranks.
PairKey agree_pair_key(const SecAggKeyPair& mine, std::span<const unsigned char> their_public,
                       int my_rank, int their_rank, std::uint64_t context);

// v[i] += (or, with `subtract`, -=) the 32-bit little-endian word first + i of ChaCha20's
// keystream under `key` with nonce = step, modulo 2^32. Throws dpg::Error(invalid_argument) when
// the range passes 2^36 words (the 32-bit block counter's reach).
void add_pair_mask(std::span<std::uint32_t> v, const PairKey& key, std::uint64_t step,
                   bool subtract, std::size_t first = 0);

// The masks of one peer against all the others: keys[p] is the pair key with rank p (from
// agree_pair_key), empty at `rank` itself and present everywhere else. Throws
// dpg::Error(invalid_argument) naming the rank when that does not hold.
class PairwiseMasker {
 public:
  PairwiseMasker(int rank, std::vector<std::optional<PairKey>> keys);

  // Adds every pair's mask to v (words [0, v.size()) of each stream): that of a peer of higher
  // rank added, of lower rank subtracted, so that over all peers the masks cancel modulo 2^32.
  void mask(std::span<std::uint32_t> v, std::uint64_t step) const;

  int rank() const { return rank_; }
  int world() const { return static_cast<int>(keys_.size()); }

 private:
  int rank_;
  std::vector<std::optional<PairKey>> keys_;
};

}  // namespace dpg::dp
