// --secure-noise: the exact discrete Gaussian (dp/discrete_gaussian.h), its grid, and the
// mechanism that releases through it.
#include <doctest/doctest.h>

#include <limits>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstddef>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "dp/clip.h"
#include "dp/discrete_gaussian.h"
#include "dp/mechanism.h"
#include "dp/secure_noise.h"
#include "runtime/core/error.h"
#include "runtime/core/rng.h"
#include "runtime/model/mlp.h"

using dpg::dp::add_discrete_gaussian;
using dpg::dp::NoiseKey;
using dpg::dp::plan_noise_grid;

namespace {

// Pearson's chi-square of `draws` against N_Z(0, s2), bins |k| <= 4 sqrt(s2) (beyond: one bin).
double chi_square(const std::vector<std::int64_t>& draws, double s2, int* bins) {
  const auto reach = static_cast<std::int64_t>(std::ceil(4.0 * std::sqrt(s2)));
  double z = 0;
  for (std::int64_t k = -40 * reach; k <= 40 * reach; ++k) z += std::exp(-double(k * k) / (2 * s2));
  std::map<std::int64_t, double> seen;
  for (std::int64_t x : draws) seen[std::abs(x) > reach ? reach + 1 : x] += 1;
  double chi = 0, tail = 1;
  const double n = static_cast<double>(draws.size());
  for (std::int64_t k = -reach; k <= reach; ++k) {
    const double p = std::exp(-double(k * k) / (2 * s2)) / z;
    tail -= p;
    const double o = seen.count(k) ? seen[k] : 0.0;
    chi += (o - n * p) * (o - n * p) / (n * p);
  }
  const double o = seen.count(reach + 1) ? seen[reach + 1] : 0.0;
  chi += (o - n * tail) * (o - n * tail) / (n * tail);
  *bins = static_cast<int>(2 * reach + 2);
  return chi;
}

}  // namespace

TEST_CASE("discrete gaussian: the exact pmf of N_Z(0, s2) by chi-square, with power to tell s2") {
  for (std::uint64_t s2 : {1ULL, 4ULL, 50ULL}) {
    CAPTURE(s2);
    std::vector<std::int64_t> x(200000, 0);
    add_discrete_gaussian(x, s2, NoiseKey::fixed(11), 3);
    int bins = 0;
    const double chi = chi_square(x, static_cast<double>(s2), &bins);
    const double df = bins - 1;
    // 6 standard deviations of the chi-square's spread above its mean: a fixed key, so the
    // outcome is the same every run; a wrong pmf is far above it.
    CHECK(chi < df + 6 * std::sqrt(2 * df));
    int other_bins = 0;
    const double other = chi_square(x, 1.25 * static_cast<double>(s2), &other_bins);
    CHECK(other > other_bins - 1 + 20 * std::sqrt(2.0 * (other_bins - 1)));
  }
}

TEST_CASE("discrete gaussian: moments and tails at the grid's variances; signs balanced") {
  const std::uint64_t s2 = 1ULL << 50;  // sigma 2^25, the recipe's order of magnitude
  const double sd = std::sqrt(static_cast<double>(s2));
  std::vector<std::int64_t> x(1 << 18, 0);
  add_discrete_gaussian(x, s2, NoiseKey::from_os(), 9);
  double mean = 0, var = 0, m4 = 0, beyond2 = 0, positive = 0;
  for (std::int64_t v : x) mean += static_cast<double>(v);
  mean /= static_cast<double>(x.size());
  for (std::int64_t v : x) {
    const double d = static_cast<double>(v) - mean;
    var += d * d;
    m4 += d * d * d * d;
    beyond2 += std::abs(d) > 2 * sd ? 1 : 0;
    positive += v > 0 ? 1 : 0;
  }
  const double n = static_cast<double>(x.size());
  var /= n;
  CHECK(std::abs(mean) < 5 * sd / std::sqrt(n));
  CHECK(var / (sd * sd) == doctest::Approx(1.0).epsilon(0.015));
  CHECK(m4 / n / (var * var) == doctest::Approx(3.0).epsilon(0.04));
  CHECK(beyond2 / n == doctest::Approx(0.0455).epsilon(0.06));
  CHECK(positive / n == doctest::Approx(0.5).epsilon(0.01));
}

// A figure, not a check (docs/BENCHMARKS.md): run with -s to see it.
TEST_CASE("discrete gaussian: the recipe's 203,530 values at its s2, timed") {
  const auto grid = plan_noise_grid(2.46, 203530, 784);
  std::vector<std::int64_t> x(203530, 0);
  const NoiseKey key = NoiseKey::fixed(99);
  add_discrete_gaussian(x, grid.sigma2, key, 0);  // warm-up
  double best = 1e9;
  for (int rep = 1; rep <= 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    add_discrete_gaussian(x, grid.sigma2, key, static_cast<std::uint64_t>(rep));
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                              .count());
  }
  MESSAGE("add_discrete_gaussian, 203530 values at s2 = " << grid.sigma2 << ": " << best * 1e3
                                                          << " ms, " << best * 1e9 / 203530.0
                                                          << " ns a value (best of 3)");
  CHECK(std::abs(x[0]) < (std::int64_t{1} << 40));
}

TEST_CASE("discrete gaussian: range by range equals the whole; keys and streams independent") {
  const NoiseKey key = NoiseKey::fixed(42);
  std::vector<std::int64_t> whole(1000), parts(1000);
  for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = parts[i] = static_cast<std::int64_t>(i);
  add_discrete_gaussian(whole, 1000, key, 7);
  const std::size_t cuts[] = {0, 3, 8, 13, 500, 517, 1000};
  for (std::size_t k = 0; k + 1 < std::size(cuts); ++k) {
    add_discrete_gaussian(std::span(parts).subspan(cuts[k], cuts[k + 1] - cuts[k]), 1000, key, 7,
                          cuts[k]);
  }
  CHECK(whole == parts);

  const std::size_t n = 1 << 16;
  std::vector<std::int64_t> a(n, 0), b(n, 0), c(n, 0);
  add_discrete_gaussian(a, 10000, key, 1);
  add_discrete_gaussian(b, 10000, key, 2);
  add_discrete_gaussian(c, 10000, NoiseKey::fixed(43), 1);
  double streams = 0, keys = 0, next = 0;
  for (std::size_t i = 0; i < n; ++i) {
    streams += static_cast<double>(a[i] * b[i]);
    keys += static_cast<double>(a[i] * c[i]);
    if (i + 1 < n) next += static_cast<double>(a[i] * a[i + 1]);
  }
  CHECK(std::abs(streams / n / 10000) < 0.02);
  CHECK(std::abs(keys / n / 10000) < 0.02);
  CHECK(std::abs(next / n / 10000) < 0.02);
}

TEST_CASE("discrete gaussian: bad variances and ranges are refused, overflow is an error") {
  std::vector<std::int64_t> x(4, 0);
  CHECK_THROWS_WITH(add_discrete_gaussian(x, 0, NoiseKey::fixed(1), 0),
                    doctest::Contains("sigma2"));
  CHECK_THROWS_WITH(add_discrete_gaussian(x, (1ULL << 52) + 1, NoiseKey::fixed(1), 0),
                    doctest::Contains("sigma2"));
  CHECK_THROWS_WITH(add_discrete_gaussian(x, 4, NoiseKey::fixed(1), 0, (1ULL << 30) - 2),
                    doctest::Contains("ChaCha20's counter (2^30 values)"));
  std::vector<std::int64_t> edge(64, INT64_MAX);
  CHECK_THROWS_WITH(add_discrete_gaussian(edge, 1ULL << 40, NoiseKey::fixed(1), 0),
                    doctest::Contains("int64 range"));
}

TEST_CASE("noise grid: the largest power of two up to 2^16 keeping sigma l2 <= 2^26") {
  const double eta = dpg::dp::float_allowance(784);
  CHECK(eta == doctest::Approx(3176.0 / 16777216.0));
  const auto recipe = plan_noise_grid(2.46, 203530, 784);
  CHECK(recipe.scale == 65536.0);
  CHECK(recipe.l2 == doctest::Approx(65536.0 * (1 + eta) + std::sqrt(203530.0) / 2));
  CHECK(static_cast<double>(recipe.sigma2) >= (2.46 * recipe.l2) * (2.46 * recipe.l2));
  CHECK(static_cast<double>(recipe.sigma2) < (2.46 * recipe.l2) * (2.46 * recipe.l2) + 2);
  CHECK(plan_noise_grid(1000, 203530, 784).scale == 65536.0);
  CHECK(plan_noise_grid(2000, 203530, 784).scale == 32768.0);  // 2000 (2^16 + 226) > 2^26
  CHECK_THROWS_WITH(plan_noise_grid(1e6, 203530, 784), doctest::Contains("noise_multiplier"));
  CHECK_THROWS_WITH(plan_noise_grid(0, 10, 10), doctest::Contains("noise_multiplier"));
  CHECK_THROWS_WITH(plan_noise_grid(1, 10, 0), doctest::Contains("widest"));
}

namespace {

// A batch of n examples of a small tanh MLP, forward and backward done, clip factors to C = 1.
struct Batch {
  dpg::model::Mlp m{dpg::model::MlpSpec{12, {16, 8}, 5, dpg::model::Activation::tanh}, 4};
  dpg::model::Workspace ws;
  std::vector<float> scale;
  Batch(std::size_t n, std::uint64_t seed, std::size_t skip = SIZE_MAX) {
    dpg::Rng rng(seed);
    std::vector<float> x(n * 12);
    std::vector<std::int32_t> y(n);
    for (std::size_t i = 0; i < n; ++i) {
      const float spread = 0.05f + 3.0f * static_cast<float>(i % 7);
      for (int k = 0; k < 12; ++k) x[i * 12 + k] = spread * static_cast<float>(rng.normal());
      y[i] = static_cast<std::int32_t>(rng.below(5));
    }
    // `skip`: the same batch without that example (a neighbouring data set).
    if (skip < n) {
      x.erase(x.begin() + skip * 12, x.begin() + (skip + 1) * 12);
      y.erase(y.begin() + skip);
      --n;
    }
    ws.resize(m.spec(), n);
    std::copy(x.begin(), x.end(), ws.act[0].begin());
    m.forward(ws);
    m.loss_and_backward(y, ws, true);
    std::vector<float> sq(n);
    scale.resize(n);
    m.per_example_sq_norms(ws, sq);
    dpg::dp::clip_factors(sq, 1.0f, scale);
  }
};

}  // namespace

TEST_CASE("grid sums: each clipped example rounded, summed exactly; a neighbour moves it by one "
          "example's integer vector, within l2") {
  const float to_grid = 65536.0f;
  const std::size_t n = 40;
  Batch whole(n, 3);
  const std::size_t d = whole.m.num_params();
  std::vector<std::int64_t> sum(d, 0);
  whole.m.accumulate_gradient_on_grid(whole.ws, whole.scale, to_grid, sum);
  // The same integers example by example: each one's rounded entries, summed.
  std::vector<std::int64_t> by_example(d, 0);
  for (std::size_t i = 0; i < n; ++i) {
    Batch one(n, 3);
    std::vector<float> only(n, 0.0f);
    only[i] = one.scale[i];
    std::vector<std::int64_t> g(d, 0);
    one.m.accumulate_gradient_on_grid(one.ws, only, to_grid, g);
    for (std::size_t k = 0; k < d; ++k) by_example[k] += g[k];
  }
  CHECK(sum == by_example);
  // Remove example 5 (clipped hard: its spread is the largest of the first seven).
  Batch without(n, 3, 5);
  std::vector<std::int64_t> less(d, 0);
  without.m.accumulate_gradient_on_grid(without.ws, without.scale, to_grid, less);
  double diff2 = 0;
  for (std::size_t k = 0; k < d; ++k) {
    const double v = static_cast<double>(sum[k] - less[k]);
    diff2 += v * v;
  }
  const auto grid = plan_noise_grid(1.0, d, whole.m.widest());
  CHECK(grid.scale == 65536.0);
  CHECK(whole.scale[5] < 0.5f);  // the example was clipped
  CHECK(std::sqrt(diff2) <= grid.l2);
  CHECK(std::sqrt(diff2) > 0.99 * 65536.0);
}

TEST_CASE("mechanism: secure noise releases the grid sum noised; floats written are rounded in") {
  dpg::dp::MechanismOptions opt;
  opt.noise_multiplier = 1e-3;  // sigma l2 below 2^24: every released value is exact in float
  opt.clip_norm = 1.0f;
  opt.secure_noise = true;
  opt.widest_layer = 100;
  const std::size_t d = 50000;
  dpg::dp::GaussianMechanism m(d, opt, 5, 0);
  CHECK(m.sums_on_grid());
  const auto grid = plan_noise_grid(1e-3, d, 100);
  CHECK(m.to_grid() == 65536.0f);
  auto floats = m.begin_step();
  auto ints = m.grid_sum();
  std::vector<std::int64_t> x(d);
  for (std::size_t i = 0; i < d; ++i) {
    x[i] = static_cast<std::int64_t>(30000 * std::sin(static_cast<double>(i)));
    ints[i] = x[i];
  }
  floats[7] = 0.25f;  // a caller's own addition (an audit canary): 0.25 * 2^16 grid steps
  x[7] += 16384;
  const auto g = m.release().values();
  double var = 0;
  std::size_t off_grid = 0;
  for (std::size_t i = 0; i < d; ++i) {
    const double on = static_cast<double>(g[i]) * grid.scale;
    off_grid += on != std::nearbyint(on) ? 1 : 0;
    const double noise = on - static_cast<double>(x[i]);
    var += noise * noise;
  }
  CHECK(off_grid == 0);
  CHECK(var / d / static_cast<double>(grid.sigma2) == doctest::Approx(1.0).epsilon(0.03));
  // The next step starts from zero on the grid.
  m.begin_step();
  const auto next = m.grid_sum();
  CHECK(std::count(next.begin(), next.end(), 0) == static_cast<std::ptrdiff_t>(d));
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

TEST_CASE("secure noise: every key from the OS is new") {
  CHECK(NoiseKey::from_os().bytes != NoiseKey::from_os().bytes);
}

TEST_CASE("mechanism: secure aggregation sums on the grid too: the exact integer sum goes out") {
  // The examples' integers are summed exactly (grid_sum, as secure noise's); floats a caller
  // writes (an audit canary) are rounded in; nothing is rounded from a float sum of the batch.
  dpg::dp::MechanismOptions opt;
  opt.noise_multiplier = 1.0;
  opt.clip_norm = 1.0f;
  opt.expected_batch = 1.0;
  opt.secure_aggregation = true;
  opt.grid_scale = 65536.0;
  opt.skellam_mu = 0;  // no noise: the release is the sum itself
  const std::size_t d = 1000;
  dpg::dp::GaussianMechanism m(d, opt, 5, 0);
  CHECK(m.sums_on_grid());
  CHECK(m.to_grid() == 65536.0f);
  auto floats = m.begin_step();
  auto ints = m.grid_sum();
  std::vector<std::int64_t> x(d);
  for (std::size_t i = 0; i < d; ++i) {
    x[i] = static_cast<std::int64_t>(3e8 * std::sin(static_cast<double>(i)));
    ints[i] = x[i];
  }
  floats[7] = 0.25f;
  x[7] += 16384;
  const auto g = m.release().values();
  for (std::size_t i = 0; i < d; ++i) {
    CAPTURE(i);
    CHECK(static_cast<double>(g[i]) * 65536.0 == doctest::Approx(static_cast<double>(x[i])));
  }
  // A sum outside int32 is an error, not a wrapped value.
  m.begin_step();
  m.grid_sum()[3] = std::int64_t{1} << 31;
  CHECK_THROWS_WITH_AS(m.release(), doctest::Contains("leaves the int32 range"), dpg::Error);
}

TEST_CASE("discrete gaussian: drawn on several threads, the noise is one thread's bit for bit") {
  using dpg::dp::add_discrete_gaussian;
  using dpg::dp::NoiseKey;
  const std::uint64_t s2 = 123456789;
  std::vector<std::int64_t> one(100003, 5);
  add_discrete_gaussian(one, s2, NoiseKey::fixed(21), 4, 17);
  for (int threads : {2, 3, 7, 64}) {
    CAPTURE(threads);
    std::vector<std::int64_t> many(100003, 5);
    add_discrete_gaussian(many, s2, NoiseKey::fixed(21), 4, 17, threads);
    CHECK(many == one);
  }
  std::vector<std::int64_t> x(10);
  CHECK_THROWS_WITH_AS(add_discrete_gaussian(x, s2, NoiseKey::fixed(1), 0, 0, 0),
                       doctest::Contains("threads"), dpg::Error);
  CHECK_THROWS_WITH_AS(add_discrete_gaussian(x, s2, NoiseKey::fixed(1), 0, 0, 65),
                       doctest::Contains("threads"), dpg::Error);
  // A failure on a helper thread (a sum leaving int64) is this call's, after every thread ended.
  std::vector<std::int64_t> full(100000, 0);
  std::fill(full.begin() + 70000, full.begin() + 71000, std::numeric_limits<std::int64_t>::max());
  CHECK_THROWS_WITH_AS(add_discrete_gaussian(full, s2, NoiseKey::fixed(2), 0, 0, 4),
                       doctest::Contains("leaves the int64 range"), dpg::Error);
}
