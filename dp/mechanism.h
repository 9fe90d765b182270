// The Gaussian mechanism of DP-SGD, and the one gradient type allowed to leave a peer.
//
// A step writes the sum of clipped per-example gradients into accumulator(); release() adds
// N(0, (sigma C)^2) to every coordinate once, divides by the public expected batch size, and hands
// back a PrivateGradient. Exchanges and optimisers take PrivateGradient, which only release() can
// make, so "nothing derived from an un-noised gradient leaves the process" holds by construction.
//
// release_range() noises one range of the step's sum (a layer, as soon as its clipped sum is done)
// and hands it out while the rest is still being summed; the noise is indexed by position, so a
// gradient released range by range carries exactly the values of one released whole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "dp/discrete_gaussian.h"
#include "dp/secure_noise.h"
#include "runtime/core/rng.h"
#include "runtime/core/wire.h"

namespace dpg::dp {

class GaussianMechanism;

class PrivateGradient {
 public:
  std::span<const float> values() const { return values_; }
  // Noise multiplier this gradient carries (0 when DP is off: then it is not private).
  double noise_multiplier() const { return sigma_; }
  // Values [offset, offset + count) of this gradient: a view of released values is still released.
  PrivateGradient part(std::size_t offset, std::size_t count) const;
  // lo followed by hi, adjacent in memory (two parts of one released gradient); throws otherwise.
  static PrivateGradient join(const PrivateGradient& lo, const PrivateGradient& hi);
  // What another peer released through its own mechanism and sent here (a parameter server
  // receiving a worker's gradient): its noise is already in it. It takes a Wire, which only a
  // completed receive (arrived()) or another issuer makes (runtime/core/wire.h), never a buffer
  // computed in this process.
  static PrivateGradient from_peer(Wire<const float> received, double sigma) {
    return PrivateGradient(received.values(), sigma);
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
  // Noise from ChaCha20 under a key from getrandom(2) (secure_noise.h) instead of the counter
  // hash under the seed: no seed to search, nothing that predicts one step's noise from another's.
  // Without secure aggregation the clipped examples are summed on an integer grid (grid_sum())
  // and take exact discrete Gaussian noise there (discrete_gaussian.h), so no float rounding of
  // the noise, nor of the sum, is released.
  bool secure_noise = false;
  // Secure noise: the model's widest layer, which sets the float allowance of the clipping in the
  // grid's sensitivity (discrete_gaussian.h). 0: the number of parameters (a loose bound).
  int widest_layer = 0;
  // Secure noise: the threads that draw the discrete Gaussian (the same values whatever the count).
  int noise_threads = 1;
  // Secure aggregation (privacy_plan.h's SecureAggregationPlan): release() puts the clipped sum
  // on the grid (grid_scale steps per C) and adds Skellam(skellam_mu) there instead of Gaussian
  // noise; aggregate() masks and sums the integers and hands back the decoded sum.
  bool secure_aggregation = false;
  double grid_scale = 0;
  double skellam_mu = 0;  // this peer's share of the sum's Skellam parameter
};

class GaussianMechanism {
 public:
  GaussianMechanism(std::size_t num_params, MechanismOptions options, std::uint64_t seed,
                    std::uint64_t rank);

  const MechanismOptions& options() const { return options_; }
  // Zeroes the accumulator and returns it for the step's clipped sum.
  std::span<float> begin_step();
  // Secure noise, and secure aggregation: the step's clipped examples are summed here, on the
  // integer grid, instead of in begin_step()'s floats; each entry of an example clipped to C is
  // rounded after scaling by to_grid() (model::Mlp's *_on_grid), so one example moves the sum by
  // exactly its own integer vector. Zeroed by begin_step().
  bool sums_on_grid() const { return (noise_grid_.has_value() && sigma() > 0.0) || on_grid(); }
  std::span<std::int64_t> grid_sum() { return grid_sum_; }
  // Whatever is also written to begin_step()'s floats (the audit's canaries) is rounded onto the
  // grid and added to grid_sum() at the release.
  float to_grid() const;
  // Adds the noise (also to an empty batch's zero sum) and divides by the expected batch size:
  // to every value not yet released this step by release_range(); returns the whole gradient.
  PrivateGradient release();
  // Noises and scales values [begin, end) of the step's sum alone, as release() would, and returns
  // them; the rest of the sum may still be written. Each value is released once per step: a range
  // overlapping one released before throws failed_precondition.
  PrivateGradient release_range(std::size_t begin, std::size_t end);
  // A whole step's release drawn on an accelerator (runtime/model/device_mlp.h): the device
  // clips each example's gradient to options().clip_norm, sums, adds N(0, (sigma() C)^2) from
  // its own Philox stream and divides by options().expected_batch, exactly what release() would
  // do with this mechanism's settings; `fill` copies that result into the step's buffer. Begins
  // the step itself. Not with secure noise or secure aggregation, whose noise only the CPU draws
  // (failed_precondition). `fill` may copy in pieces, calling arrived(offset, count) as each
  // lands; each is then handed to on_part (when set) as a released part, so that it can go on
  // the wire while the next ones cross.
  using Arrived = std::function<void(std::size_t offset, std::size_t count)>;
  using DeviceFill = std::function<void(std::span<float> buffer, const Arrived& arrived)>;
  using PartSink = std::function<void(const PrivateGradient& part, std::size_t offset)>;
  PrivateGradient release_from_device(const DeviceFill& fill, const PartSink& on_part = {});
  // Hands a released gradient of this mechanism (or a part of one), as a Wire (the one issuer of
  // released values: runtime/core/wire.h), to `combine`, which may
  // change it in place with other peers' released gradients (an all-reduce), and returns the
  // result. `combine` sees only noised values, so what comes back is post-processing and stays a
  // PrivateGradient.
  PrivateGradient exchange(const PrivateGradient& g,
                           const std::function<void(Wire<float>)>& combine);
  // Secure aggregation: hands this step's noised grid values (int32 as uint32, released whole by
  // release()) to `mask_and_sum`, which masks them and sums every peer's modulo 2^32 in place;
  // returns that sum decoded (over grid_scale, times C, over the expected batch). What leaves
  // is noised on the grid before any mask, so the result stays a PrivateGradient.
  PrivateGradient aggregate(const PrivateGradient& g,
                            const std::function<void(Wire<std::uint32_t>)>& mask_and_sum);

  // The generator of the steps' noise keys, for a checkpoint between steps: a mechanism given
  // it back draws the same noise for the next steps. It is as secret as the noise seed.
  Rng::State rng_state() const { return rng_.state(); }
  void set_rng_state(const Rng::State& s) { rng_ = Rng::from_state(s); }

 private:
  double sigma() const { return options_.enabled ? options_.noise_multiplier : 0.0; }
  // Noises and scales [begin, end) (nothing checked).
  void noise(std::size_t begin, std::size_t end);
  // secure_noise without secure aggregation: discrete Gaussian noise on grid_sum_'s [begin, end),
  // then those integers, decoded and scaled, into the buffer.
  void noise_on_grid(std::size_t begin, std::size_t end);
  // Secure aggregation: whether it is on; the sum onto the grid with its noise (into grid_, and
  // this peer's share decoded into buffer_); grid values decoded into buffer_.
  bool on_grid() const;
  void release_on_grid();
  void decode_grid(std::span<const std::uint32_t> values);

  MechanismOptions options_;
  std::vector<float> buffer_;
  std::vector<std::uint32_t> grid_;  // secure aggregation: the step's noised grid values
  Rng rng_;
  // The step's noise key, drawn at its first release (one draw per step, as a whole release).
  std::uint64_t key_ = 0;
  bool keyed_ = false;
  // secure_noise: the run's key, and the step count that is each step's nonce under it; without
  // secure aggregation, the grid of its discrete Gaussian noise and a range's grid values.
  std::optional<NoiseKey> secure_key_;
  std::optional<NoiseGrid> noise_grid_;
  std::vector<std::int64_t> grid_sum_;
  std::uint64_t step_ = 0;
  std::vector<std::pair<std::size_t, std::size_t>> released_;  // this step's released ranges
};

}  // namespace dpg::dp
