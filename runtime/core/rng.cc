#include "runtime/core/rng.h"

#include <cmath>

#include "runtime/core/check.h"
#include "runtime/core/error.h"

namespace dpg {
namespace {

std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(std::uint64_t seed, std::uint64_t stream) {
  std::uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ULL);
  for (auto& s : s_) s = splitmix64(x);
}

Rng Rng::from_state(const State& st) {
  if ((st.s[0] | st.s[1] | st.s[2] | st.s[3]) == 0) {
    fail(Code::invalid_argument, "random generator state: all zero (never a reachable state)");
  }
  Rng r(0);
  for (int i = 0; i < 4; ++i) r.s_[i] = st.s[i];
  r.spare_normal_ = st.spare_normal;
  r.has_spare_ = st.has_spare;
  return r;
}

std::uint64_t Rng::next() {
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double Rng::uniform_open() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }

std::uint64_t Rng::below(std::uint64_t n) {
  DPG_CHECK(n > 0);
  // Lemire's nearly divisionless method with rejection, so every value is equally likely.
  unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
  auto low = static_cast<std::uint64_t>(m);
  if (low < n) {
    const std::uint64_t threshold = -n % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next()) * n;
      low = static_cast<std::uint64_t>(m);
    }
  }
  return static_cast<std::uint64_t>(m >> 64);
}

double Rng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_normal_;
  }
  const double u1 = uniform_open();
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * M_PI * u2;
  spare_normal_ = r * std::sin(theta);
  has_spare_ = true;
  return r * std::cos(theta);
}

double Rng::gamma(double shape) {
  DPG_CHECK(shape > 0.0);
  if (shape < 1.0) {
    // Boost to shape + 1 and scale back: G(a) = G(a + 1) * U^(1/a).
    return gamma(shape + 1.0) * std::pow(uniform_open(), 1.0 / shape);
  }
  // Marsaglia and Tsang (2000).
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = 0.0;
    double v = 0.0;
    do {
      x = normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = uniform_open();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

}  // namespace dpg
