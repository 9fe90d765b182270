#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/model/blas_threads.h"
#include "runtime/model/gemm.h"
#include "runtime/model/mlp.h"

using dpg::model::Activation;
using dpg::model::Mlp;
using dpg::model::MlpSpec;
using dpg::model::Workspace;

namespace {

struct Batch {
  std::vector<float> x;
  std::vector<std::int32_t> y;
};

Batch random_batch(const MlpSpec& spec, std::size_t n, std::uint64_t seed) {
  dpg::Rng rng(seed);
  Batch b;
  for (std::size_t i = 0; i < n * spec.inputs; ++i) b.x.push_back(static_cast<float>(rng.normal()));
  for (std::size_t i = 0; i < n; ++i) b.y.push_back(static_cast<std::int32_t>(rng.below(spec.classes)));
  return b;
}

double loss_sum(const Mlp& m, const Batch& b, Workspace& ws) {
  ws.resize(m.spec(), b.y.size());
  std::copy(b.x.begin(), b.x.end(), ws.act[0].begin());
  m.forward(ws);
  m.loss_and_backward(b.y, ws, false);
  double s = 0;
  for (std::size_t i = 0; i < b.y.size(); ++i) s += ws.loss[i];
  return s;
}

std::vector<float> gradient(const Mlp& m, const Batch& b, Workspace& ws) {
  ws.resize(m.spec(), b.y.size());
  std::copy(b.x.begin(), b.x.end(), ws.act[0].begin());
  m.forward(ws);
  m.loss_and_backward(b.y, ws, true);
  std::vector<float> g(m.num_params(), 0.0f);
  m.accumulate_gradient(ws, {}, g);
  return g;
}

}  // namespace

TEST_CASE("mlp: backward matches central finite differences") {
  // One BLAS thread runs the GEMMs in oneDNN where the build has it, two in OpenBLAS.
  for (const auto& [act, threads] : {std::pair{Activation::tanh, 1}, std::pair{Activation::relu, 1},
                                     std::pair{Activation::tanh, 2}, std::pair{Activation::relu, 2}}) {
    CAPTURE(dpg::model::gemm_library(threads));
    dpg::model::set_blas_threads(threads);
    MlpSpec spec{6, {7, 5}, 4, act};
    Mlp m(spec, 3);
    const Batch b = random_batch(spec, 9, 5);
    Workspace ws;
    const std::vector<float> g = gradient(m, b, ws);
    int checked = 0;
    for (std::size_t p = 0; p < m.num_params(); ++p) {
      const float saved = m.params()[p];
      const float h = act == Activation::relu ? 1e-3f : 1e-2f;
      m.params()[p] = saved + h;
      const double up = loss_sum(m, b, ws);
      m.params()[p] = saved - h;
      const double down = loss_sum(m, b, ws);
      m.params()[p] = saved;
      const double fd = (up - down) / (2.0 * h);
      CHECK(std::abs(fd - g[p]) <= 2e-3 + 2e-2 * std::abs(fd));
      ++checked;
    }
    CHECK(checked == static_cast<int>(m.num_params()));
  }
}

TEST_CASE("mlp: ghost per-example norms equal the norms of materialised per-example gradients") {
  MlpSpec spec{10, {8, 6}, 3, Activation::tanh};
  Mlp m(spec, 1);
  const std::size_t n = 12;
  const Batch b = random_batch(spec, n, 2);
  Workspace ws;
  ws.resize(spec, n);
  std::copy(b.x.begin(), b.x.end(), ws.act[0].begin());
  m.forward(ws);
  m.loss_and_backward(b.y, ws, true);
  std::vector<float> ghost(n);
  m.per_example_sq_norms(ws, ghost);
  for (std::size_t i = 0; i < n; ++i) {
    Batch one{{b.x.begin() + i * spec.inputs, b.x.begin() + (i + 1) * spec.inputs}, {b.y[i]}};
    Workspace w1;
    const auto g = gradient(m, one, w1);
    double sq = 0;
    for (float v : g) sq += static_cast<double>(v) * v;
    CHECK(ghost[i] == doctest::Approx(sq).epsilon(1e-4));
  }
}

TEST_CASE("mlp: parameters are PyTorch-style uniform and seeded") {
  MlpSpec spec{100, {50}, 10, Activation::relu};
  Mlp a(spec, 7), b(spec, 7), c(spec, 8);
  CHECK(a.num_params() == 50u * 101 + 10u * 51);
  bool same = true, differs = false;
  for (std::size_t i = 0; i < a.num_params(); ++i) {
    same = same && a.params()[i] == b.params()[i];
    differs = differs || a.params()[i] != c.params()[i];
    CHECK(std::abs(a.params()[i]) <= 1.0f / std::sqrt(50.0f) + 1e-6f);
  }
  CHECK(same);
  CHECK(differs);
  for (std::size_t i = 0; i < 50u * 101; ++i) CHECK(std::abs(a.params()[i]) <= 0.1f + 1e-6f);
}

TEST_CASE("mlp: the same logits and gradient on one and on two BLAS threads") {
  MlpSpec spec{50, {40, 30}, 7, Activation::relu};
  Mlp m(spec, 4);
  const Batch b = random_batch(spec, 33, 6);
  std::vector<std::vector<float>> logits, grads;
  for (int threads : {1, 2}) {
    dpg::model::set_blas_threads(threads);
    Workspace ws;
    grads.push_back(gradient(m, b, ws));
    logits.push_back({ws.act.back().begin(), ws.act.back().begin() + 33 * 7});
  }
  for (std::size_t i = 0; i < logits[0].size(); ++i) {
    CHECK(logits[0][i] == doctest::Approx(logits[1][i]).epsilon(1e-5));
  }
  for (std::size_t i = 0; i < grads[0].size(); ++i) {
    CHECK(grads[0][i] == doctest::Approx(grads[1][i]).epsilon(1e-5));
  }
}

TEST_CASE("mlp: evaluate counts correct predictions over chunks") {
  MlpSpec spec{4, {3}, 2, Activation::relu};
  Mlp m(spec, 0);
  const Batch b = random_batch(spec, 3000, 9);
  Workspace ws;
  const auto ev = m.evaluate(b.x, b.y, ws);
  CHECK(ev.rows == 3000);
  // The same count by hand, one example at a time.
  std::size_t correct = 0;
  for (std::size_t i = 0; i < 3000; ++i) {
    Workspace w1;
    w1.resize(spec, 1);
    std::copy_n(b.x.begin() + i * 4, 4, w1.act[0].begin());
    m.forward(w1);
    correct += m.loss_and_backward(std::span(&b.y[i], 1), w1, false);
  }
  CHECK(ev.correct == correct);
  CHECK(std::isfinite(ev.loss_sum));
}

namespace {

// The clipped batch's sum on secure noise's grid (clip norm 1, 2^16 steps per unit), the batch
// being rows `rows` of `b` in that order, its values computed row-exact or by the GEMMs.
std::vector<std::int64_t> grid_sum(const Mlp& m, const Batch& b,
                                   const std::vector<std::size_t>& rows, bool exact) {
  const MlpSpec& spec = m.spec();
  Workspace ws;
  ws.exact_rows = exact;
  ws.resize(spec, rows.size());
  std::vector<std::int32_t> labels;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::copy_n(b.x.begin() + rows[i] * spec.inputs, spec.inputs,
                ws.act[0].begin() + i * spec.inputs);
    labels.push_back(b.y[rows[i]]);
  }
  m.forward(ws);
  m.loss_and_backward(labels, ws, true);
  std::vector<float> scale(rows.size());
  m.per_example_sq_norms(ws, scale);
  for (float& s : scale) s = std::min(1.0f, 1.0f / (std::sqrt(s) + 1e-6f));  // dp::clip_factors
  std::vector<std::int64_t> grid(m.num_params(), 0);
  m.accumulate_gradient_on_grid(ws, scale, 65536.0f, grid);
  return grid;
}

// How many grid values of the batch with example x added differ from those without it plus x's
// own: zero when adding one example moves the sum by exactly that example's integers.
std::size_t moved_by_others(const Mlp& m, const Batch& b, std::size_t n, std::size_t at,
                            bool exact) {
  std::vector<std::size_t> without(n), with;
  for (std::size_t i = 0; i < n; ++i) without[i] = i;
  with = without;
  with.insert(with.begin() + static_cast<std::ptrdiff_t>(at), n);  // example n joins at `at`
  const auto a = grid_sum(m, b, with, exact);
  const auto s = grid_sum(m, b, without, exact);
  const auto x = grid_sum(m, b, {n}, exact);
  std::size_t moved = 0;
  for (std::size_t p = 0; p < a.size(); ++p) moved += a[p] - s[p] != x[p] ? 1 : 0;
  return moved;
}

}  // namespace

TEST_CASE("mlp: row-exact values do not depend on the rest of the batch") {
  // The recipe's model and a deeper tanh one; the batch sizes span the GEMMs' kernel choices
  // and the row-exact tiles' edges; the new example joins first, in the middle and last.
  const std::vector<MlpSpec> specs{{784, {256}, 10, Activation::relu},
                                   {50, {40, 30}, 7, Activation::tanh}};
  for (const MlpSpec& spec : specs) {
    Mlp m(spec, 11);
    const Batch b = random_batch(spec, 701, 12);
    for (int threads : {1, 2}) {
      dpg::model::set_blas_threads(threads);
      for (std::size_t n : {1u, 6u, 33u, 200u, 700u}) {
        for (std::size_t at : {std::size_t{0}, n / 2, n}) {
          CAPTURE(spec.inputs);
          CAPTURE(threads);
          CAPTURE(n);
          CAPTURE(at);
          CHECK(moved_by_others(m, b, n, at, true) == 0);
        }
      }
    }
  }
}

TEST_CASE("mlp: the grid sum is the same on one thread and on several") {
  // Row-exact products and the grid's integer sums share rows out among the BLAS threads.
  const MlpSpec spec{784, {256}, 10, Activation::relu};
  Mlp m(spec, 13);
  const Batch b = random_batch(spec, 700, 14);
  std::vector<std::size_t> rows(700);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = i;
  std::vector<std::vector<std::int64_t>> sums;
  for (int threads : {1, 2, 3}) {
    dpg::model::set_blas_threads(threads);
    sums.push_back(grid_sum(m, b, rows, true));
  }
  dpg::model::set_blas_threads(1);
  CHECK(sums[1] == sums[0]);
  CHECK(sums[2] == sums[0]);
}

TEST_CASE("mlp: row-exact values are the GEMMs' to float rounding") {
  MlpSpec spec{50, {40, 30}, 7, Activation::tanh};
  Mlp m(spec, 4);
  const Batch b = random_batch(spec, 33, 6);
  std::vector<std::vector<float>> logits, grads;
  for (bool exact : {false, true}) {
    Workspace ws;
    ws.exact_rows = exact;
    grads.push_back(gradient(m, b, ws));
    logits.push_back({ws.act.back().begin(), ws.act.back().begin() + 33 * 7});
    std::vector<float> norms(33);
    m.per_example_sq_norms(ws, norms);
    grads.back().insert(grads.back().end(), norms.begin(), norms.end());
  }
  for (std::size_t i = 0; i < logits[0].size(); ++i) {
    CHECK(logits[0][i] == doctest::Approx(logits[1][i]).epsilon(1e-5));
  }
  for (std::size_t i = 0; i < grads[0].size(); ++i) {
    CHECK(grads[0][i] == doctest::Approx(grads[1][i]).epsilon(1e-4));
  }
}
