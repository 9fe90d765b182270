#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "dp/mechanism.h"
#include "dp/noise.h"

namespace {

struct Moments {
  double mean = 0, var = 0, kurtosis = 0, beyond2 = 0;
};

Moments moments(const std::vector<float>& v) {
  Moments m;
  const double n = static_cast<double>(v.size());
  for (float x : v) m.mean += x;
  m.mean /= n;
  double m4 = 0;
  for (float x : v) {
    const double d = x - m.mean;
    m.var += d * d;
    m4 += d * d * d * d;
  }
  m.var /= n;
  m.kurtosis = m4 / n / (m.var * m.var);
  for (float x : v) m.beyond2 += std::abs(x - m.mean) > 2.0 * std::sqrt(m.var) ? 1 : 0;
  m.beyond2 /= n;
  return m;
}

}  // namespace

TEST_CASE("noise: N(0, stddev^2) moments, tails and independence") {
  const std::size_t n = 1 << 20;
  std::vector<float> a(n, 0.0f), b(n, 0.0f);
  dpg::dp::add_gaussian(a, 2.0, 123);
  dpg::dp::add_gaussian(b, 2.0, 124);
  const Moments m = moments(a);
  CHECK(std::abs(m.mean) < 5 * 2.0 / std::sqrt(static_cast<double>(n)));
  CHECK(m.var == doctest::Approx(4.0).epsilon(0.01));
  CHECK(m.kurtosis == doctest::Approx(3.0).epsilon(0.02));
  CHECK(m.beyond2 == doctest::Approx(0.0455).epsilon(0.03));
  // The two halves of a Box-Muller pair (positions j and j + 128 of a 256 block), neighbours,
  // and two keys are uncorrelated.
  double pair = 0, next = 0, keys = 0;
  for (std::size_t b = 0; b < n; b += 256) {
    for (std::size_t j = 0; j < 128; ++j) pair += a[b + j] * a[b + 128 + j];
  }
  for (std::size_t i = 0; i + 1 < n; i += 2) next += a[i] * a[i + 1];
  CHECK(std::abs(next / (n / 2) / 4.0) < 0.01);
  for (std::size_t i = 0; i < n; ++i) keys += a[i] * b[i];
  CHECK(std::abs(pair / (n / 2) / 4.0) < 0.01);
  CHECK(std::abs(keys / n / 4.0) < 0.01);
}

TEST_CASE("noise: the same key gives the same noise, added on top of the values") {
  std::vector<float> a(1001, 1.0f), b(1001, 1.0f);
  dpg::dp::add_gaussian(a, 0.5, 9);
  dpg::dp::add_gaussian(b, 0.5, 9);
  CHECK(a == b);
  std::vector<float> c(1001, 0.0f);
  dpg::dp::add_gaussian(c, 0.5, 9);
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(c[i] + 1.0f));
}

TEST_CASE("noise: with a scale, the values plus the same noise, times the scale") {
  std::vector<float> plain(1001), scaled(1001);
  for (std::size_t i = 0; i < plain.size(); ++i) plain[i] = scaled[i] = 0.01f * static_cast<float>(i);
  dpg::dp::add_gaussian(plain, 0.5, 9);
  dpg::dp::add_gaussian(scaled, 0.5, 9, 0.25f);
  for (std::size_t i = 0; i < plain.size(); ++i) {
    CHECK(scaled[i] == doctest::Approx(plain[i] * 0.25f).epsilon(1e-6));
  }
}

TEST_CASE("mechanism: an empty batch still gets noise of sd sigma*C/B; disabled adds none") {
  dpg::dp::MechanismOptions opt;
  opt.clip_norm = 2.0f;
  opt.noise_multiplier = 1.5;
  opt.expected_batch = 10.0;
  dpg::dp::GaussianMechanism mech(200000, opt, 1, 0);
  mech.begin_step();
  const auto released = mech.release();
  std::vector<float> v(released.values().begin(), released.values().end());
  CHECK(std::sqrt(moments(v).var) == doctest::Approx(1.5 * 2.0 / 10.0).epsilon(0.01));
  CHECK(released.noise_multiplier() == 1.5);

  // A second step draws fresh noise.
  mech.begin_step();
  const auto again = mech.release();
  CHECK(again.values()[0] != v[0]);

  // Rank streams differ.
  dpg::dp::GaussianMechanism other(200000, opt, 1, 1);
  other.begin_step();
  CHECK(other.release().values()[0] != v[0]);

  opt.enabled = false;
  dpg::dp::GaussianMechanism plain(1000, opt, 1, 0);
  auto acc = plain.begin_step();
  for (float& x : acc) x = 5.0f;
  for (float x : plain.release().values()) CHECK(x == doctest::Approx(0.5f));
}
