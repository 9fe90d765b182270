#include "dp/mechanism.h"

#include <algorithm>
#include <cmath>

#include "dp/noise.h"
#include "dp/skellam.h"
#include "runtime/core/error.h"

namespace dpg::dp {

GaussianMechanism::GaussianMechanism(std::size_t num_params, MechanismOptions options,
                                     std::uint64_t seed, std::uint64_t rank)
    : options_(options), buffer_(num_params), rng_(seed, stream_for(stream::kNoise, rank)) {
  if (options_.expected_batch <= 0.0) {
    fail(Code::invalid_argument, "batch_size: the expected batch size must be positive, got " +
                                     std::to_string(options_.expected_batch));
  }
  if (options_.enabled && (options_.clip_norm <= 0.0f || options_.noise_multiplier < 0.0)) {
    fail(Code::invalid_argument, "clip_norm must be positive and noise_multiplier non-negative, got " +
                                     std::to_string(options_.clip_norm) + " and " +
                                     std::to_string(options_.noise_multiplier));
  }
  if (options_.enabled && options_.secure_noise) secure_key_ = NoiseKey::from_os();
  if (secure_key_ && !options_.secure_aggregation && options_.noise_multiplier > 0.0) {
    if (!(options_.clip_norm >= 1e-20f && options_.clip_norm <= 1e20f)) {
      fail(Code::invalid_argument, "clip_norm: secure noise's grid needs it in [1e-20, 1e20], got " +
                                       std::to_string(options_.clip_norm));
    }
    const int widest = options_.widest_layer > 0 ? options_.widest_layer
                                                 : static_cast<int>(std::min<std::size_t>(
                                                       num_params, 1u << 30));
    noise_grid_ = plan_noise_grid(options_.noise_multiplier, num_params, widest);
    grid_sum_.resize(num_params);
  }
  if (options_.enabled && options_.secure_aggregation) {
    if (!(options_.grid_scale >= 1) || !(options_.skellam_mu >= 0)) {
      fail(Code::invalid_argument, "secure aggregation: grid_scale must be >= 1 and skellam_mu "
                                   ">= 0, got " + std::to_string(options_.grid_scale) + " and " +
                                       std::to_string(options_.skellam_mu));
    }
    grid_.resize(num_params);
    grid_sum_.resize(num_params);
  }
}

bool GaussianMechanism::on_grid() const { return options_.enabled && options_.secure_aggregation; }

PrivateGradient PrivateGradient::part(std::size_t offset, std::size_t count) const {
  if (offset > values_.size() || count > values_.size() - offset) {
    fail(Code::internal, "private gradient: part [" + std::to_string(offset) + ", +" +
                             std::to_string(count) + ") of " + std::to_string(values_.size()));
  }
  return PrivateGradient(values_.subspan(offset, count), sigma_);
}

PrivateGradient PrivateGradient::join(const PrivateGradient& lo, const PrivateGradient& hi) {
  if (lo.values_.data() + lo.values_.size() != hi.values_.data() || lo.sigma_ != hi.sigma_) {
    fail(Code::internal, "private gradient: join of parts that are not adjacent");
  }
  return PrivateGradient({lo.values_.data(), lo.values_.size() + hi.values_.size()}, lo.sigma_);
}

std::span<float> GaussianMechanism::begin_step() {
  std::fill(buffer_.begin(), buffer_.end(), 0.0f);
  std::fill(grid_sum_.begin(), grid_sum_.end(), 0);
  keyed_ = false;
  ++step_;
  released_.clear();
  return buffer_;
}

void GaussianMechanism::noise(std::size_t begin, std::size_t end) {
  const float inv = static_cast<float>(1.0 / options_.expected_batch);
  const std::span<float> range(buffer_.data() + begin, end - begin);
  if (sums_on_grid()) {
    noise_on_grid(begin, end);
  } else if (sigma() > 0.0) {
    if (!keyed_) {
      key_ = rng_.next();
      keyed_ = true;
    }
    add_gaussian(range, sigma() * options_.clip_norm, key_, inv, begin);  // noise, then / batch
  } else {
    for (float& v : range) v *= inv;
  }
}

float GaussianMechanism::to_grid() const {
  if (on_grid()) return static_cast<float>(options_.grid_scale / options_.clip_norm);
  if (!noise_grid_) fail(Code::internal, "to_grid: the mechanism does not sum on the grid");
  return static_cast<float>(noise_grid_->scale / options_.clip_norm);
}

void GaussianMechanism::noise_on_grid(std::size_t begin, std::size_t end) {
  // What a caller wrote to begin_step()'s floats (the audit's canaries), rounded onto the grid;
  // then N_Z(0, s2) on the grid sum; the integer times C / scale / batch.
  const double to = noise_grid_->scale / options_.clip_norm;
  for (std::size_t i = begin; i < end; ++i) {
    if (buffer_[i] == 0.0f) continue;
    const double v = std::nearbyint(static_cast<double>(buffer_[i]) * to);
    if (!(std::abs(v) < 0x1.0p62)) {
      fail(Code::internal, "secure noise: value " + std::to_string(i) + " (" +
                               std::to_string(buffer_[i]) + ") does not fit the grid");
    }
    grid_sum_[i] += static_cast<std::int64_t>(v);
  }
  const std::span<std::int64_t> range(grid_sum_.data() + begin, end - begin);
  add_discrete_gaussian(range, noise_grid_->sigma2, *secure_key_, step_, begin,
                        options_.noise_threads);
  const double from_grid = options_.clip_norm / noise_grid_->scale / options_.expected_batch;
  for (std::size_t i = begin; i < end; ++i) {
    buffer_[i] = static_cast<float>(static_cast<double>(grid_sum_[i]) * from_grid);
  }
}

PrivateGradient GaussianMechanism::release_range(std::size_t begin, std::size_t end) {
  if (on_grid()) {
    fail(Code::failed_precondition, "release_range: secure aggregation releases the whole sum");
  }
  if (begin > end || end > buffer_.size()) {
    fail(Code::internal, "release_range: [" + std::to_string(begin) + ", " + std::to_string(end) +
                             ") is outside the " + std::to_string(buffer_.size()) + " values");
  }
  for (const auto& [b, e] : released_) {
    if (begin < e && b < end) {
      fail(Code::failed_precondition,
           "release_range: [" + std::to_string(begin) + ", " + std::to_string(end) +
               ") overlaps [" + std::to_string(b) + ", " + std::to_string(e) +
               "), released already this step");
    }
  }
  if (begin < end) {
    noise(begin, end);
    released_.emplace_back(begin, end);
  }
  return PrivateGradient({buffer_.data() + begin, end - begin}, sigma());
}

void GaussianMechanism::release_on_grid() {
  // The examples' exact integer sum (grid_sum_), plus what a caller wrote to the floats (the
  // audit's canaries) rounded onto the grid, as int32 (the plan keeps every value and sum inside
  // its range), then the Skellam noise on the grid, modulo 2^32.
  const double to_grid = options_.grid_scale / options_.clip_norm;
  for (std::size_t i = 0; i < buffer_.size(); ++i) {
    const double v = static_cast<double>(grid_sum_[i]) +
                     std::nearbyint(static_cast<double>(buffer_[i]) * to_grid);
    if (!(std::abs(v) <= 2147483647.0)) {
      fail(Code::internal, "secure aggregation: value " + std::to_string(i) + " (" +
                               std::to_string(v) + " grid steps) leaves the int32 range");
    }
    grid_[i] = static_cast<std::uint32_t>(static_cast<std::int64_t>(v));
  }
  if (options_.skellam_mu > 0) {
    const NoiseKey key = secure_key_ ? *secure_key_ : NoiseKey::fixed(rng_.next());
    add_skellam(grid_, options_.skellam_mu, key, step_);
  }
  decode_grid(grid_);
}

void GaussianMechanism::decode_grid(std::span<const std::uint32_t> values) {
  const double from_grid = options_.clip_norm / options_.grid_scale / options_.expected_batch;
  for (std::size_t i = 0; i < values.size(); ++i) {
    buffer_[i] = static_cast<float>(static_cast<double>(static_cast<std::int32_t>(values[i])) *
                                    from_grid);
  }
}

PrivateGradient GaussianMechanism::aggregate(
    const PrivateGradient& g, const std::function<void(Wire<std::uint32_t>)>& mask_and_sum) {
  if (!on_grid() || g.values().data() != buffer_.data() || g.values().size() != buffer_.size() ||
      released_.size() != 1) {
    fail(Code::internal, "aggregate: needs secure aggregation and this step's whole release");
  }
  mask_and_sum(Wire<std::uint32_t>(std::span<std::uint32_t>(grid_)));
  decode_grid(grid_);
  return PrivateGradient(buffer_, g.noise_multiplier());
}

PrivateGradient GaussianMechanism::release() {
  if (on_grid()) {
    if (!released_.empty()) fail(Code::failed_precondition, "release: released already this step");
    release_on_grid();
    released_.assign(1, {0, buffer_.size()});
    return PrivateGradient(buffer_, sigma());
  }
  // The gaps between the ranges released so far, then the whole is released.
  std::sort(released_.begin(), released_.end());
  std::size_t at = 0;
  for (const auto& [b, e] : released_) {
    if (at < b) noise(at, b);
    at = std::max(at, e);
  }
  if (at < buffer_.size()) noise(at, buffer_.size());
  released_.assign(1, {0, buffer_.size()});
  return PrivateGradient(buffer_, sigma());
}

PrivateGradient GaussianMechanism::release_from_device(const DeviceFill& fill,
                                                       const PartSink& on_part) {
  if (on_grid() || secure_key_) {
    fail(Code::failed_precondition,
         "release_from_device: secure noise and secure aggregation draw their noise on the CPU");
  }
  begin_step();
  // The device released the whole step before any of it is copied here.
  released_.assign(1, {0, buffer_.size()});
  fill(buffer_, [&](std::size_t offset, std::size_t count) {
    if (offset > buffer_.size() || count > buffer_.size() - offset) {
      fail(Code::internal, "release_from_device: a piece beyond the gradient");
    }
    if (on_part) {
      on_part(PrivateGradient(std::span<const float>(buffer_).subspan(offset, count), sigma()),
              offset);
    }
  });
  return PrivateGradient(buffer_, sigma());
}

PrivateGradient GaussianMechanism::exchange(const PrivateGradient& g,
                                            const std::function<void(Wire<float>)>& combine) {
  // Only pointers are compared (no state of the step): a communication thread may exchange one
  // released part while the compute thread releases the next.
  const float* p = g.values().data();
  if (p < buffer_.data() || p + g.values().size() > buffer_.data() + buffer_.size()) {
    fail(Code::internal, "exchange: the gradient was not released by this mechanism");
  }
  const std::span<float> mine(buffer_.data() + (p - buffer_.data()), g.values().size());
  combine(Wire<float>(mine));
  return PrivateGradient(mine, g.noise_multiplier());
}

}  // namespace dpg::dp
