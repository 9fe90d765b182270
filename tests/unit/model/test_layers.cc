// Each layer of runtime/model/layers.h against brute force, on a batch whose example i has the
// loss L_i = <out_i, R_i> for a fixed random R (so that R is the output gradient): the backward
// pass and every example's parameter gradient against central finite differences of L, every
// example's squared gradient norm (ghost or materialised) against the norm of its gradient made
// alone (a batch of one), and the clipped sum against the scaled sum of those, with an example
// whose values are NaN and whose scale is 0, and an empty batch.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/rng.h"
#include "runtime/model/layers.h"
#include "tests/unit/dp/errors.h"

namespace m = dpg::model;
using m::Shape;

namespace {

std::vector<float> normal(std::size_t n, dpg::Rng& rng) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.normal());
  return v;
}

// sum_i <out_i, R_i> for the inputs x, in double.
double total_loss(const m::Layer& l, const std::vector<float>& p, const std::vector<float>& x,
                  const std::vector<float>& r, std::size_t batch) {
  std::vector<float> out(batch * l.out_shape().size());
  l.forward(p, x.data(), out.data(), batch);
  double s = 0;
  for (std::size_t j = 0; j < out.size(); ++j) s += static_cast<double>(out[j]) * r[j];
  return s;
}

// Example i's gradient of the layer's parameters, made alone (a batch of one, scale 1).
std::vector<float> alone(const m::Layer& l, const std::vector<float>& p, const std::vector<float>& x,
                         const std::vector<float>& r, std::size_t i) {
  std::vector<float> g(l.param_count(), 0.0f);
  l.add_gradient(p, x.data() + i * l.in_shape().size(), r.data() + i * l.out_shape().size(),
                 nullptr, 1, g);
  return g;
}

bool close(double got, double want, double tol) {
  return std::fabs(got - want) <= tol * (1.0 + std::fabs(want));
}

void check_layer(const m::Layer& l, std::uint64_t seed) {
  CAPTURE(l.describe());
  constexpr std::size_t kBatch = 5;
  dpg::Rng rng(seed);
  std::vector<float> p(l.param_count());
  l.init(p, rng);
  for (float& v : p) v += static_cast<float>(0.1 * rng.normal());  // beyond the init's values
  std::vector<float> x = normal(kBatch * l.in_shape().size(), rng);
  const std::vector<float> r = normal(kBatch * l.out_shape().size(), rng);
  std::vector<float> out(kBatch * l.out_shape().size()), gin(x.size());
  l.forward(p, x.data(), out.data(), kBatch);
  l.backward(p, x.data(), out.data(), r.data(), gin.data(), kBatch);

  // The input gradient against finite differences, at up to 40 inputs.
  constexpr float kH = 1e-3f;
  for (std::size_t n = 0; n < std::min<std::size_t>(40, x.size()); ++n) {
    const std::size_t j = static_cast<std::size_t>(rng.below(x.size()));
    const float keep = x[j];
    x[j] = keep + kH;
    const double up = total_loss(l, p, x, r, kBatch);
    x[j] = keep - kH;
    const double down = total_loss(l, p, x, r, kBatch);
    x[j] = keep;
    CAPTURE(j);
    CHECK(close(gin[j], (up - down) / (2.0 * kH), 2e-2));
  }
  if (l.param_count() == 0) return;

  // Each example's parameter gradient against finite differences of its own loss.
  std::vector<std::vector<float>> each;
  for (std::size_t i = 0; i < kBatch; ++i) each.push_back(alone(l, p, x, r, i));
  for (std::size_t n = 0; n < 30; ++n) {
    const std::size_t i = static_cast<std::size_t>(rng.below(kBatch));
    const std::size_t k = static_cast<std::size_t>(rng.below(p.size()));
    std::vector<float> xi(x.begin() + static_cast<long>(i * l.in_shape().size()),
                          x.begin() + static_cast<long>((i + 1) * l.in_shape().size()));
    std::vector<float> ri(r.begin() + static_cast<long>(i * l.out_shape().size()),
                          r.begin() + static_cast<long>((i + 1) * l.out_shape().size()));
    const float keep = p[k];
    p[k] = keep + kH;
    const double up = total_loss(l, p, xi, ri, 1);
    p[k] = keep - kH;
    const double down = total_loss(l, p, xi, ri, 1);
    p[k] = keep;
    CAPTURE(i);
    CAPTURE(k);
    CHECK(close(each[i][k], (up - down) / (2.0 * kH), 2e-2));
  }

  // Squared norms of the whole batch against each example's gradient made alone.
  std::vector<float> sq(kBatch, 0.5f);  // adds to what is there
  l.add_sq_norms(p, x.data(), r.data(), kBatch, sq.data());
  for (std::size_t i = 0; i < kBatch; ++i) {
    double want = 0;
    for (float v : each[i]) want += static_cast<double>(v) * v;
    CAPTURE(i);
    CHECK(close(sq[i] - 0.5, want, 1e-4));
  }

  // The clipped sum, one example NaN with scale 0 and one more dropped: the scaled sum of the
  // others, finite.
  const std::size_t bad = 2;
  for (std::size_t j = 0; j < l.in_shape().size(); ++j) {
    x[bad * l.in_shape().size() + j] = std::numeric_limits<float>::quiet_NaN();
  }
  const std::vector<float> scale = {0.5f, 1.0f, 0.0f, 0.0f, 0.25f};
  std::vector<float> sum(p.size(), 1.0f);
  l.add_gradient(p, x.data(), r.data(), scale.data(), kBatch, sum);
  for (std::size_t k = 0; k < p.size(); ++k) {
    double want = 1.0;
    for (std::size_t i = 0; i < kBatch; ++i) {
      if (scale[i] != 0.0f) want += static_cast<double>(scale[i]) * each[i][k];
    }
    CAPTURE(k);
    REQUIRE(std::isfinite(sum[k]));
    CHECK(close(sum[k], want, 1e-4));
  }

  // An empty batch changes nothing.
  std::vector<float> untouched(p.size(), 3.0f);
  l.add_gradient(p, x.data(), r.data(), scale.data(), 0, untouched);
  l.add_sq_norms(p, x.data(), r.data(), 0, sq.data());
  for (float v : untouched) CHECK(v == 3.0f);
}

}  // namespace

TEST_CASE("layers: dense, activations, flatten, pooling against finite differences") {
  check_layer(*m::dense({3, 2, 2}, 5), 1);
  check_layer(*m::activation({2, 3, 3}, dpg::Activation::tanh), 2);
  check_layer(*m::activation({2, 3, 3}, dpg::Activation::relu), 3);
  check_layer(*m::flatten({2, 3, 3}), 4);
  check_layer(*m::max_pool({2, 5, 5}, 2, 1), 5);
  check_layer(*m::max_pool({2, 6, 6}, 2, 2), 6);
  check_layer(*m::avg_pool({3, 5, 4}, 3, 2), 7);
}

TEST_CASE("layers: convolutions, ghost and materialised norms alike") {
  for (const m::NormMethod method : {m::NormMethod::ghost, m::NormMethod::materialised}) {
    CAPTURE(m::to_string(method));
    check_layer(*m::conv2d({1, 8, 8}, 3, 3, 1, 1, method), 10);
    check_layer(*m::conv2d({2, 9, 7}, 4, 4, 2, 2, method), 11);
    check_layer(*m::conv2d({3, 6, 6}, 2, 2, 2, 0, method), 12);
  }
}

TEST_CASE("layers: group norm, with and without a learned scale") {
  check_layer(*m::group_norm({4, 3, 3}, 2, true), 20);
  check_layer(*m::group_norm({6, 2, 3}, 3, false), 21);
  check_layer(*m::group_norm({3, 4, 4}, 1, true), 22);
  // Each example is normalised on its own: an example's output does not depend on the others.
  const auto gn = m::group_norm({4, 3, 3}, 2, false);
  dpg::Rng rng(23);
  const std::vector<float> two = normal(2 * 36, rng);
  std::vector<float> out2(72), out1(36);
  gn->forward({}, two.data(), out2.data(), 2);
  gn->forward({}, two.data() + 36, out1.data(), 1);
  for (std::size_t j = 0; j < 36; ++j) CHECK(out1[j] == out2[36 + j]);
}

TEST_CASE("layers: Tramer and Boneh's CNN for 28x28 inputs, shapes and each convolution's norms") {
  // conv 16 8x8 stride 2 pad 2, max pool 2 stride 1, conv 32 4x4 stride 2, max pool 2 stride 1,
  // dense 32, dense 10: the first convolution has 169 positions (2 T^2 = 57,122 above its 1,024
  // weights: materialised), the second 25 (1,250 below 8,192: ghost).
  const auto c1 = m::conv2d({1, 28, 28}, 16, 8, 2, 2);
  CHECK(c1->out_shape() == Shape{16, 13, 13});
  CHECK(c1->norm_method() == m::NormMethod::materialised);
  const auto p1 = m::max_pool(c1->out_shape(), 2, 1);
  CHECK(p1->out_shape() == Shape{16, 12, 12});
  const auto c2 = m::conv2d(p1->out_shape(), 32, 4, 2, 0);
  CHECK(c2->out_shape() == Shape{32, 5, 5});
  CHECK(c2->norm_method() == m::NormMethod::ghost);
  const auto p2 = m::max_pool(c2->out_shape(), 2, 1);
  CHECK(p2->out_shape() == Shape{32, 4, 4});
  const auto d1 = m::dense(p2->out_shape(), 32);
  CHECK(c1->param_count() + c2->param_count() + d1->param_count() +
            m::dense({32, 1, 1}, 10)->param_count() ==
        16 * 65 + 32 * 257 + 32 * 513 + 10 * 33);
  CHECK(c1->describe() == "conv 16 8x8 stride 2 pad 2");
}

TEST_CASE("layers: bad shapes are refused, naming the layer") {
  using dpg::testing::contains;
  using dpg::testing::error_message;
  CHECK(contains(error_message([] { m::group_norm({6, 2, 2}, 4, true); }), "group norm: 4 groups"));
  CHECK(contains(error_message([] { m::conv2d({1, 4, 4}, 2, 8, 1, 0); }), "conv: a 8-wide window"));
  CHECK(contains(error_message([] { m::max_pool({1, 4, 4}, 2, 0); }),
                 "max pool: kernel and stride"));
  CHECK(contains(error_message([] { m::dense({0, 1, 1}, 3); }), "dense: the input 0x1x1"));
}
