// Explicitly seeded random numbers, identical on every platform: xoshiro256** seeded through
// splitmix64, with our own uniform, normal and gamma draws (the std:: distributions are
// implementation-defined, and peers must agree on shuffles and partitions without talking).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

namespace dpg {

class Rng {
 public:
  // Everything a generator is, to carry it across a checkpoint: a generator rebuilt from its
  // state continues the same sequence.
  struct State {
    std::uint64_t s[4];
    double spare_normal;
    bool has_spare;
  };

  // Different (seed, stream) pairs give independent sequences; streams separate purposes and ranks.
  explicit Rng(std::uint64_t seed, std::uint64_t stream = 0);

  std::uint64_t next();
  double uniform();                     // [0, 1), 53 random bits
  double uniform_open();                // (0, 1)
  std::uint64_t below(std::uint64_t n); // uniform on [0, n), unbiased; n > 0
  double normal();                      // standard normal
  double gamma(double shape);           // Gamma(shape, 1), shape > 0

  State state() const { return {{s_[0], s_[1], s_[2], s_[3]}, spare_normal_, has_spare_}; }
  // Throws invalid_argument for the all-zero state, which xoshiro never leaves.
  static Rng from_state(const State& st);

  template <typename T>
  void shuffle(std::span<T> items) {
    for (std::size_t i = items.size(); i > 1; --i) {
      std::swap(items[i - 1], items[below(i)]);
    }
  }

 private:
  std::uint64_t s_[4];
  double spare_normal_ = 0.0;
  bool has_spare_ = false;
};

// Named streams, so that no two purposes ever share a sequence.
namespace stream {
inline constexpr std::uint64_t kPartition = 1;
inline constexpr std::uint64_t kInit = 2;
inline constexpr std::uint64_t kSampler = 3;
inline constexpr std::uint64_t kNoise = 4;
inline constexpr std::uint64_t kShuffle = 5;
inline constexpr std::uint64_t kPairing = 6;  // ad-psgd: which neighbour to average with
inline constexpr std::uint64_t kValidation = 7;  // prepare: the rows held out for validation
inline constexpr std::uint64_t kTopology = 8;    // the random graphs (random-regular)
}  // namespace stream

// Stream id for a purpose on one rank.
inline std::uint64_t stream_for(std::uint64_t purpose, std::uint64_t rank) {
  return (purpose << 32) ^ rank;
}

}  // namespace dpg
