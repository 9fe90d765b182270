#include "dp/mechanism.h"

#include <algorithm>

#include "dp/noise.h"
#include "runtime/core/error.h"

namespace dpg::dp {

PrivateGradient PrivateGradient::slice(std::size_t offset, std::size_t count) const {
  if (offset > values_.size() || count > values_.size() - offset) {
    fail(Code::internal, "PrivateGradient::slice: [" + std::to_string(offset) + ", +" +
                             std::to_string(count) + ") is outside " +
                             std::to_string(values_.size()) + " values");
  }
  return PrivateGradient(values_.subspan(offset, count), sigma_);
}

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
}

std::span<float> GaussianMechanism::begin_step() {
  std::fill(buffer_.begin(), buffer_.end(), 0.0f);
  return buffer_;
}

PrivateGradient GaussianMechanism::release() {
  const double sigma = options_.enabled ? options_.noise_multiplier : 0.0;
  const float inv = static_cast<float>(1.0 / options_.expected_batch);
  if (sigma > 0.0) {
    add_gaussian(buffer_, sigma * options_.clip_norm, rng_.next(), inv);  // noise, then / batch
  } else {
    for (float& v : buffer_) v *= inv;
  }
  return PrivateGradient(buffer_, sigma);
}

PrivateGradient GaussianMechanism::exchange(const PrivateGradient& g,
                                            const std::function<void(std::span<float>)>& combine) {
  if (g.values().data() != buffer_.data() || g.values().size() != buffer_.size()) {
    fail(Code::internal, "exchange: the gradient was not released by this mechanism");
  }
  combine(buffer_);
  return PrivateGradient(buffer_, g.noise_multiplier());
}

}  // namespace dpg::dp
