// A Sequential model of layers: the dense-tanh-dense one against the MLP (same starting values,
// losses, per-example norms and clipped sums), and the cnn preset through the whole model
// against gradients made one example at a time and finite differences of an example's loss.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/rng.h"
#include "runtime/model/layers.h"
#include "runtime/model/mlp.h"
#include "runtime/model/sequential.h"

namespace m = dpg::model;

namespace {

struct Data {
  std::vector<float> x;
  std::vector<std::int32_t> y;
};

Data make_examples(std::size_t rows, std::size_t width, int classes, std::uint64_t seed) {
  dpg::Rng rng(seed);
  Data d;
  for (std::size_t i = 0; i < rows * width; ++i) d.x.push_back(static_cast<float>(rng.normal()));
  for (std::size_t i = 0; i < rows; ++i) {
    d.y.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(classes))));
  }
  return d;
}

void run(const m::Sequential& s, const Data& d, m::Pass& pass) {
  s.resize(pass, d.y.size());
  std::copy(d.x.begin(), d.x.end(), pass.act[0].begin());
  s.forward(pass);
  s.loss_and_backward(d.y, pass, true);
}

bool close(double got, double want, double tol) {
  return std::fabs(got - want) <= tol * (1.0 + std::fabs(want));
}

// Example i's gradient made alone.
std::vector<float> alone(const m::Sequential& s, const Data& d, std::size_t i) {
  const std::size_t w = s.input().size();
  Data one{std::vector<float>(d.x.begin() + static_cast<long>(i * w),
                              d.x.begin() + static_cast<long>((i + 1) * w)),
           {d.y[i]}};
  m::Pass pass;
  run(s, one, pass);
  std::vector<float> g(s.num_params(), 0.0f);
  s.accumulate_gradient(pass, {}, g);
  return g;
}

}  // namespace

TEST_CASE("sequential: dense, tanh, dense is the MLP") {
  const m::MlpSpec spec{.inputs = 20, .hidden = {16}, .classes = 5,
                        .activation = dpg::Activation::tanh};
  const m::Mlp mlp(spec, 42);
  std::vector<std::unique_ptr<m::Layer>> layers;
  layers.push_back(m::dense({20, 1, 1}, 16));
  layers.push_back(m::activation({16, 1, 1}, dpg::Activation::tanh));
  layers.push_back(m::dense({16, 1, 1}, 5));
  const m::Sequential seq(std::move(layers), 5, 42);
  REQUIRE(seq.num_params() == mlp.num_params());
  for (std::size_t k = 0; k < seq.num_params(); ++k) CHECK(seq.params()[k] == mlp.params()[k]);

  const Data d = make_examples(9, 20, 5, 7);
  m::Pass pass;
  run(seq, d, pass);
  m::Workspace ws;
  ws.resize(spec, 9);
  std::copy(d.x.begin(), d.x.end(), ws.act[0].begin());
  mlp.forward(ws);
  mlp.loss_and_backward(d.y, ws, true);
  std::vector<float> sq_seq(9), sq_mlp(9);
  seq.per_example_sq_norms(pass, sq_seq);
  mlp.per_example_sq_norms(ws, sq_mlp);
  for (std::size_t i = 0; i < 9; ++i) {
    CAPTURE(i);
    CHECK(close(pass.loss[i], ws.loss[i], 1e-5));
    CHECK(close(sq_seq[i], sq_mlp[i], 1e-4));
  }
  std::vector<float> scale = {1, 0.5f, 0, 0.25f, 1, 1, 0.1f, 0, 0.9f};
  std::vector<float> g_seq(seq.num_params(), 0.0f), g_mlp(mlp.num_params(), 0.0f);
  seq.accumulate_gradient(pass, scale, g_seq);
  mlp.accumulate_gradient(ws, scale, g_mlp);
  for (std::size_t k = 0; k < g_seq.size(); ++k) {
    CAPTURE(k);
    CHECK(close(g_seq[k], g_mlp[k], 1e-4));
  }
}

TEST_CASE("sequential: the cnn preset, each example's norm and gradient through every layer") {
  m::Sequential cnn(m::preset_layers("cnn", {1, 28, 28}, 10), 10, 3);
  CHECK(cnn.num_params() == 26010);  // Tramer and Boneh's CNN for MNIST-sized inputs
  const auto lines = cnn.describe();
  REQUIRE(lines.size() == 10);
  CHECK(lines[0] == "conv 16 8x8 stride 2 pad 2 -> 16x13x13, 1040 parameters, norms materialised");
  CHECK(lines[3] == "conv 32 4x4 stride 2 pad 0 -> 32x5x5, 8224 parameters, norms ghost");

  const Data d = make_examples(4, 784, 10, 11);
  m::Pass pass;
  run(cnn, d, pass);
  std::vector<float> sq(4);
  cnn.per_example_sq_norms(pass, sq);
  std::vector<std::vector<float>> each;
  for (std::size_t i = 0; i < 4; ++i) each.push_back(alone(cnn, d, i));
  for (std::size_t i = 0; i < 4; ++i) {
    double want = 0;
    for (float v : each[i]) want += static_cast<double>(v) * v;
    CAPTURE(i);
    CHECK(want > 0);
    CHECK(close(sq[i], want, 1e-4));
  }
  const std::vector<float> scale = {0.5f, 0.0f, 1.0f, 0.2f};
  std::vector<float> sum(cnn.num_params(), 0.0f);
  cnn.accumulate_gradient(pass, scale, sum);
  for (std::size_t k = 0; k < sum.size(); k += 37) {
    double want = 0;
    for (std::size_t i = 0; i < 4; ++i) want += static_cast<double>(scale[i]) * each[i][k];
    CAPTURE(k);
    CHECK(close(sum[k], want, 1e-4));
  }

  // Finite differences of example 0's loss at parameters of every layer.
  dpg::Rng rng(5);
  const Data first{std::vector<float>(d.x.begin(), d.x.begin() + 784), {d.y[0]}};
  const auto loss_of = [&] {
    m::Pass p;
    cnn.resize(p, 1);
    std::copy(first.x.begin(), first.x.end(), p.act[0].begin());
    cnn.forward(p);
    cnn.loss_and_backward(first.y, p, false);
    return static_cast<double>(p.loss[0]);
  };
  // A small step, so that it seldom moves a max pool's choice (where the loss has a kink).
  constexpr float kH = 5e-4f;
  std::vector<std::size_t> at;  // six parameters of each layer that has any
  std::size_t offset = 0;
  for (const auto& layer : cnn.layers()) {
    for (int n = 0; layer->param_count() > 0 && n < 6; ++n) {
      at.push_back(offset + static_cast<std::size_t>(rng.below(layer->param_count())));
    }
    offset += layer->param_count();
  }
  REQUIRE(at.size() == 24);
  for (const std::size_t k : at) {
    const float keep = cnn.params()[k];
    cnn.params()[k] = keep + kH;
    const double up = loss_of();
    cnn.params()[k] = keep - kH;
    const double down = loss_of();
    cnn.params()[k] = keep;
    CAPTURE(k);
    CHECK(std::fabs(each[0][k] - (up - down) / (2.0 * kH)) <= 3e-3 + 2e-2 * std::fabs(each[0][k]));
  }

  // The evaluation's losses are the forward pass's.
  m::Pass eval;
  const auto ev = cnn.evaluate(d.x, d.y, eval);
  double total = 0;
  for (float l : pass.loss) total += l;
  CHECK(ev.rows == 4);
  CHECK(close(ev.loss_sum, total, 1e-5));
}

TEST_CASE("sequential: layers that do not chain, and unknown presets, are refused") {
  std::vector<std::unique_ptr<m::Layer>> layers;
  layers.push_back(m::dense({20, 1, 1}, 16));
  layers.push_back(m::dense({15, 1, 1}, 5));
  try {
    m::Sequential bad(std::move(layers), 5, 1);
    FAIL("accepted");
  } catch (const dpg::Error& e) {
    CHECK(std::string(e.what()).find("layer 2 (dense 5) takes 15x1x1, but layer 1 gives 16x1x1") !=
          std::string::npos);
  }
  CHECK_THROWS_AS(m::preset_layers("resnet", {1, 28, 28}, 10), dpg::Error);
  CHECK_THROWS_AS(m::preset_layers("cnn", {1, 8, 8}, 10), dpg::Error);
}
