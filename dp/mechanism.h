// The Gaussian mechanism of DP-SGD, and the one gradient type allowed to leave a peer.
//
// A step writes the sum of clipped per-example gradients into accumulator(); release() adds
// N(0, (sigma C)^2) to every coordinate once, divides by the public expected batch size, and hands
// back a PrivateGradient. Exchanges and optimisers take PrivateGradient, which only release() can
// make, so "nothing derived from an un-noised gradient leaves the process" holds by construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "runtime/core/rng.h"

namespace dpg::dp {

class GaussianMechanism;

class PrivateGradient {
 public:
  std::span<const float> values() const { return values_; }
  // Noise multiplier this gradient carries (0 when DP is off: then it is not private).
  double noise_multiplier() const { return sigma_; }
  // Values [offset, offset + count): a part of a released gradient is released too.
  PrivateGradient slice(std::size_t offset, std::size_t count) const;
  // What another peer released through its own mechanism and sent here (a parameter server
  // receiving a worker's gradient): its noise is already in it. Only for bytes that arrived
  // from a peer, never for anything computed in this process.
  static PrivateGradient from_peer(std::span<const float> received, double sigma) {
    return PrivateGradient(received, sigma);
  }

 private:
  friend class GaussianMechanism;
  PrivateGradient(std::span<const float> v, double sigma) : values_(v), sigma_(sigma) {}
  std::span<const float> values_;
  double sigma_;
};

struct MechanismOptions {
  bool enabled = true;             // false: plain SGD (no clipping, no noise), for baselines
  float clip_norm = 1.0f;          // C
  double noise_multiplier = 1.0;   // sigma; the noise standard deviation is sigma * C
  double expected_batch = 1.0;     // public denominator: q * dataset size, never the realised batch
};

class GaussianMechanism {
 public:
  GaussianMechanism(std::size_t num_params, MechanismOptions options, std::uint64_t seed,
                    std::uint64_t rank);

  const MechanismOptions& options() const { return options_; }
  // Zeroes the accumulator and returns it for the step's clipped sum.
  std::span<float> begin_step();
  // Adds the noise (also to an empty batch's zero sum) and divides by the expected batch size.
  PrivateGradient release();
  // Hands a released gradient of this mechanism to `combine`, which may change it in place with
  // other peers' released gradients (an all-reduce), and returns the result. `combine` sees only
  // noised values, so what comes back is post-processing and stays a PrivateGradient.
  PrivateGradient exchange(const PrivateGradient& g,
                           const std::function<void(std::span<float>)>& combine);

 private:
  MechanismOptions options_;
  std::vector<float> buffer_;
  Rng rng_;
};

}  // namespace dpg::dp
