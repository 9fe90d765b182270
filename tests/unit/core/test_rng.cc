#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <vector>

#include "runtime/core/os_random.h"
#include "runtime/core/rng.h"

TEST_CASE("rng: same seed and stream give the same sequence, other streams differ") {
  dpg::Rng a(42, 1), b(42, 1), c(42, 2);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const auto x = a.next();
    CHECK(x == b.next());
    differs = differs || (x != c.next());
  }
  CHECK(differs);
}

TEST_CASE("rng: uniform, below and normal have the right moments") {
  dpg::Rng r(7);
  const int n = 200000;
  double sum = 0, sum2 = 0, usum = 0;
  std::vector<int> counts(10, 0);
  for (int i = 0; i < n; ++i) {
    const double z = r.normal();
    sum += z;
    sum2 += z * z;
    const double u = r.uniform();
    CHECK(u >= 0.0);
    CHECK(u < 1.0);
    usum += u;
    counts[r.below(10)]++;
  }
  CHECK(std::abs(sum / n) < 0.01);
  CHECK(std::abs(sum2 / n - 1.0) < 0.015);
  CHECK(std::abs(usum / n - 0.5) < 0.005);
  for (int c : counts) CHECK(std::abs(c - n / 10) < 600);  // ~4.5 sigma
}

TEST_CASE("rng: gamma has mean and variance equal to its shape") {
  for (double shape : {0.3, 1.0, 4.5}) {
    dpg::Rng r(11);
    const int n = 100000;
    double sum = 0, sum2 = 0;
    for (int i = 0; i < n; ++i) {
      const double g = r.gamma(shape);
      CHECK(g >= 0.0);
      sum += g;
      sum2 += g * g;
    }
    const double mean = sum / n;
    const double var = sum2 / n - mean * mean;
    CHECK(mean == doctest::Approx(shape).epsilon(0.03));
    CHECK(var == doctest::Approx(shape).epsilon(0.06));
  }
}

TEST_CASE("rng: shuffle is a permutation") {
  dpg::Rng r(3);
  std::vector<int> v(1000);
  std::iota(v.begin(), v.end(), 0);
  r.shuffle(std::span<int>(v));
  std::vector<int> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 1000; ++i) CHECK(sorted[i] == i);
  CHECK(v != sorted);
}

TEST_CASE("os_random: fills every byte from the OS, and two draws differ") {
  // 64 bytes left zero by a draw that wrote nothing would all be 0; the chance that a real draw
  // is all zero, or repeats, is 2^-512.
  std::array<std::byte, 64> a{}, b{};
  dpg::os_random(a, "a test draw");
  dpg::os_random(b, "a test draw");
  CHECK(a != b);
  CHECK(std::any_of(a.begin(), a.end(), [](std::byte v) { return v != std::byte{0}; }));
  CHECK(dpg::os_random_u64("a test seed") != dpg::os_random_u64("a test seed"));
  dpg::os_random(std::span<std::byte>(), "nothing");  // an empty draw is fine
}
