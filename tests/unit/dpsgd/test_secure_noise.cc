#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "dp/mechanism.h"
#include "dp/secure_noise.h"

using dpg::dp::add_gaussian_secure;
using dpg::dp::NoiseKey;

namespace {
double uniform53(std::uint64_t w) { return (static_cast<double>(w >> 11) + 0.5) * 0x1.0p-53; }
}  // namespace

TEST_CASE("secure noise: ChaCha20's keystream (RFC 8439 A.1, zero key and nonce) drives the pairs") {
  // Block 0's first 16 bytes: 76 b8 e0 ad a0 f1 3d 90 | 40 5d 6a e5 53 86 bd 28.
  const double r = std::sqrt(-2.0 * std::log(uniform53(0x903df1a0ade0b876ULL)));
  const double theta = 2.0 * std::numbers::pi * uniform53(0x28bd8653e56a5d40ULL);
  std::vector<float> z(2, 0.0f);
  add_gaussian_secure(z, 1.0, NoiseKey::fixed(0), 0);
  CHECK(z[0] == static_cast<float>(r * std::cos(theta)));
  CHECK(z[1] == static_cast<float>(r * std::sin(theta)));
}

TEST_CASE("secure noise: N(0, stddev^2) moments and tails; keys and streams independent") {
  const std::size_t n = 1 << 20;
  const NoiseKey key = NoiseKey::from_os();
  std::vector<float> a(n, 0.0f), b(n, 0.0f), c(n, 0.0f);
  add_gaussian_secure(a, 2.0, key, 1);
  add_gaussian_secure(b, 2.0, key, 2);
  add_gaussian_secure(c, 2.0, NoiseKey::from_os(), 1);
  double mean = 0, var = 0, m4 = 0, beyond3 = 0;
  for (float x : a) mean += x;
  mean /= n;
  for (float x : a) {
    const double d = x - mean;
    var += d * d;
    m4 += d * d * d * d;
    beyond3 += std::abs(d) > 6.0 ? 1 : 0;
  }
  var /= n;
  CHECK(std::abs(mean) < 5 * 2.0 / std::sqrt(static_cast<double>(n)));
  CHECK(var == doctest::Approx(4.0).epsilon(0.01));
  CHECK(m4 / n / (var * var) == doctest::Approx(3.0).epsilon(0.02));
  CHECK(beyond3 / n == doctest::Approx(0.0027).epsilon(0.1));  // 2830 expected: 5 sd is 0.094
  double streams = 0, keys = 0, pair = 0;
  for (std::size_t i = 0; i < n; ++i) {
    streams += a[i] * b[i];
    keys += a[i] * c[i];
  }
  for (std::size_t i = 0; i + 1 < n; i += 2) pair += a[i] * a[i + 1];
  CHECK(std::abs(streams / n / 4.0) < 0.01);
  CHECK(std::abs(keys / n / 4.0) < 0.01);
  CHECK(std::abs(pair / (n / 2) / 4.0) < 0.01);
}

TEST_CASE("secure noise: range by range, bit for bit the noise of the whole; values kept") {
  const NoiseKey key = NoiseKey::fixed(42);
  std::vector<float> whole(1000), parts(1000);
  for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = parts[i] = 0.001f * static_cast<float>(i);
  add_gaussian_secure(whole, 0.5, key, 7, 0.25f);
  // Cuts inside a pair, inside a block and at a block's edge.
  const std::size_t cuts[] = {0, 3, 8, 13, 500, 517, 1000};
  for (std::size_t k = 0; k + 1 < std::size(cuts); ++k) {
    add_gaussian_secure(std::span(parts).subspan(cuts[k], cuts[k + 1] - cuts[k]), 0.5, key, 7,
                        0.25f, cuts[k]);
  }
  CHECK(whole == parts);
  std::vector<float> noise(1000, 0.0f);
  add_gaussian_secure(noise, 0.5, key, 7);
  for (std::size_t i = 0; i < whole.size(); ++i) {
    CHECK(whole[i] == doctest::Approx((0.001f * static_cast<float>(i) + noise[i]) * 0.25f));
  }
}

TEST_CASE("secure noise: every key from the OS is new") {
  CHECK(NoiseKey::from_os().bytes != NoiseKey::from_os().bytes);
}

TEST_CASE("mechanism: secure noise ignores the seed, so two peers with one seed differ") {
  dpg::dp::MechanismOptions opt;
  opt.noise_multiplier = 1.0;
  opt.secure_noise = true;
  dpg::dp::GaussianMechanism a(64, opt, 5, 0), b(64, opt, 5, 0);
  a.begin_step();
  b.begin_step();
  const auto ga = a.release().values();
  const auto gb = b.release().values();
  CHECK(std::vector<float>(ga.begin(), ga.end()) != std::vector<float>(gb.begin(), gb.end()));
  // Two steps of one mechanism: a new nonce each step.
  const std::vector<float> first(ga.begin(), ga.end());
  a.begin_step();
  const auto next = a.release().values();
  CHECK(first != std::vector<float>(next.begin(), next.end()));
}
