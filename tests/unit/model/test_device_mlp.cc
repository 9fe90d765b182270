// Reference tests of the device MLP (runtime/model/device_mlp.h) against the CPU model, the CPU
// clipping rule and the CPU optimiser on the same inputs. Built twice from this file:
// - test_device_mlp_host: the host instance (Thrust's C++ backend), run on every machine;
// - test_device_mlp_cuda (DPG_TEST_CUDA): the CUDA instance on GPU 0; without a GPU it prints why
//   and exits 77, meson's skip code.
//
// Tolerance: a device value d matches the reference r when |d - r| <= atol + rtol |r|, with
// atol = 1e-5 * max|r| over the vector and rtol = 1e-3. The two sum in different orders (cuBLAS's
// blocking against OpenBLAS's, the ghost norms' per-row loops against the CPU's), which moves a
// float32 value by a few ulps per addition; an indexing or clipping mistake moves it by the
// size of the values themselves.
#ifdef DPG_TEST_CUDA
#define DOCTEST_CONFIG_IMPLEMENT  // main() below skips without a GPU
#endif
#include <doctest/doctest.h>

#include <curand.h>
#ifdef DPG_TEST_CUDA
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "dp/clip.h"
#include "dp/mechanism.h"
#include "runtime/collective/neighbour.h"
#include "runtime/core/error.h"
#include "runtime/core/rng.h"
#include "runtime/model/device_mlp.h"
#include "runtime/model/mlp.h"
#include "runtime/train/optimizer.h"

using dpg::model::Activation;
using dpg::model::DeviceDpOptions;
using dpg::model::DeviceMlp;
using dpg::model::Mlp;
using dpg::model::MlpSpec;
using dpg::model::Workspace;

namespace {

std::unique_ptr<DeviceMlp> make_with(const MlpSpec& spec, std::span<const float> params) {
#ifdef DPG_TEST_CUDA
  return dpg::model::make_cuda_mlp(spec, 0, params);
#else
  return dpg::model::make_host_thrust_mlp(spec, params);
#endif
}
std::unique_ptr<DeviceMlp> make(const Mlp& cpu) { return make_with(cpu.spec(), cpu.params()); }
// Host values into device memory the model handed out (its neighbour buffers).
void to_device(float* dst, const std::vector<float>& v) {
#ifdef DPG_TEST_CUDA
  REQUIRE(cudaMemcpy(dst, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice) ==
          cudaSuccess);
#else
  std::copy(v.begin(), v.end(), dst);
#endif
}

MlpSpec spec_of(Activation act) {
  MlpSpec s;
  s.inputs = 37;
  s.hidden = {29, 19};
  s.classes = 7;
  s.activation = act;
  return s;
}

struct Rows {
  std::vector<float> x;
  std::vector<std::int32_t> y;
};

Rows random_rows(const MlpSpec& spec, std::size_t n, std::uint64_t seed) {
  dpg::Rng rng(seed);
  Rows r;
  for (std::size_t i = 0; i < n * spec.inputs; ++i) r.x.push_back(static_cast<float>(rng.normal()));
  for (std::size_t i = 0; i < n; ++i) r.y.push_back(static_cast<std::int32_t>(rng.below(spec.classes)));
  return r;
}

// The CPU's gradient of `batch` (indices into rows): forward, backward, and with dp.enabled the
// per-example norms, clip factors and clipped sum; then / expected batch. No noise (sigma 0).
struct CpuStep {
  std::vector<float> grad;
  double loss_sum = 0;
  std::size_t correct = 0, dropped = 0, clipped = 0;
};
CpuStep cpu_step(const Mlp& m, const Rows& rows, const std::vector<std::uint32_t>& batch,
                 const DeviceDpOptions& dp) {
  const std::size_t in = m.spec().inputs;
  Workspace ws;
  ws.resize(m.spec(), batch.size());
  std::vector<std::int32_t> labels;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    std::copy_n(rows.x.begin() + batch[i] * in, in, ws.act[0].begin() + i * in);
    labels.push_back(rows.y[batch[i]]);
  }
  CpuStep out;
  out.grad.assign(m.num_params(), 0.0f);
  m.forward(ws);
  out.correct = m.loss_and_backward(labels, ws, true);
  std::vector<float> scale;
  if (dp.enabled) {
    std::vector<float> sq(batch.size());
    scale.resize(batch.size());
    m.per_example_sq_norms(ws, sq);
    out.dropped = dpg::dp::clip_factors(sq, dp.clip_norm, scale);
    for (float s : scale) out.clipped += (s < 1.0f && s > 0.0f) ? 1 : 0;
  }
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (scale.empty() || scale[i] != 0.0f) out.loss_sum += ws.loss[i];
  }
  m.accumulate_gradient(ws, scale, out.grad);
  const auto inv = static_cast<float>(1.0 / dp.expected_batch);
  for (float& g : out.grad) g *= inv;
  return out;
}

void check_close(const std::vector<float>& dev, const std::vector<float>& ref, double rtol = 1e-3) {
  REQUIRE(dev.size() == ref.size());
  double max_ref = 0;
  for (float r : ref) max_ref = std::max(max_ref, std::fabs(static_cast<double>(r)));
  REQUIRE(max_ref > 0);
  const double atol = 1e-5 * max_ref;
  std::size_t bad = 0, first = 0;
  double worst = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(static_cast<double>(dev[i]) - ref[i]);
    worst = std::max(worst, err / (atol + rtol * std::fabs(static_cast<double>(ref[i]))));
    if (!(err <= atol + rtol * std::fabs(static_cast<double>(ref[i])))) {
      if (bad++ == 0) first = i;
    }
  }
  INFO("first mismatch at " << first << ": device " << dev[first] << ", reference " << ref[first]
                            << "; worst error / tolerance " << worst);
  CHECK(bad == 0);
}

// Element-wise work written as the CPU's code: the host instance gives its bits (the same
// compiler, the same expressions, the same fused multiply-adds); nvcc may fuse otherwise, which
// moves a value by an ulp or two.
void check_same_arithmetic(const std::vector<float>& dev, const std::vector<float>& ref) {
#ifdef DPG_TEST_CUDA
  check_close(dev, ref, 1e-6);
#else
  CHECK(dev == ref);
#endif
}

std::vector<float> download(const DeviceMlp& d) {
  std::vector<float> g(d.num_params());
  d.download_gradient(g);
  return g;
}

// The rows whose two largest CPU logits are within `rel` of the larger one's magnitude, or of 1
// when that is smaller.
std::size_t near_ties(const Mlp& m, const Rows& rows, float rel) {
  const std::size_t n = rows.y.size(), classes = m.spec().classes;
  Workspace ws;
  ws.resize(m.spec(), n);
  std::copy(rows.x.begin(), rows.x.end(), ws.input().begin());
  m.forward(ws);
  std::size_t ties = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<float> z(ws.act.back().begin() + i * classes,
                         ws.act.back().begin() + (i + 1) * classes);
    std::partial_sort(z.begin(), z.begin() + 2, z.end(), std::greater<>());
    if (z[0] - z[1] <= rel * std::max(1.0f, std::fabs(z[0]))) ++ties;
  }
  return ties;
}

}  // namespace

TEST_CASE("device: loss and accuracy of an evaluation match the CPU model") {
  for (Activation act : {Activation::relu, Activation::tanh}) {
    const Mlp cpu(spec_of(act), 11);
    auto dev = make(cpu);
    const Rows rows = random_rows(cpu.spec(), 5000, 3);  // more than one device chunk
    Workspace ws;
    const Mlp::Evaluation ref = cpu.evaluate(rows.x, rows.y, ws);
    const Mlp::Evaluation got = dev->evaluate(rows.x, rows.y);
    CHECK(got.rows == ref.rows);
    // The count of correct predictions may differ only by rows whose two largest logits are
    // within the sums' rounding (1e-5 of the larger), where another order of addition (cuBLAS's)
    // may pick the other class: one row per activation with these seeds, of 5,000.
    const std::size_t ties = near_ties(cpu, rows, 1e-5f);
    CAPTURE(ties);
    const auto diff = static_cast<long long>(got.correct) - static_cast<long long>(ref.correct);
    CHECK(static_cast<std::size_t>(std::llabs(diff)) <= ties);
    CHECK(got.loss_sum == doctest::Approx(ref.loss_sum).epsilon(1e-5));
  }
}

TEST_CASE("device: the non-private gradient of a gathered batch matches the CPU's") {
  const Mlp cpu(spec_of(Activation::relu), 5);
  auto dev = make(cpu);
  const Rows rows = random_rows(cpu.spec(), 300, 8);
  dev->upload_rows(rows.x, rows.y);
  CHECK(dev->resident_rows() == 300);
  std::vector<std::uint32_t> batch;
  dpg::Rng rng(4);
  for (int i = 0; i < 70; ++i) batch.push_back(static_cast<std::uint32_t>(rng.below(300)));
  batch.push_back(batch[0]);  // a repeated row counts twice
  DeviceDpOptions dp;
  dp.enabled = false;
  dp.expected_batch = 64;
  const auto stats = dev->gradient(batch, 0, dp);
  const CpuStep ref = cpu_step(cpu, rows, batch, dp);
  check_close(download(*dev), ref.grad);
  CHECK(stats.batch == batch.size());
  CHECK(stats.correct == ref.correct);
  CHECK(stats.dropped == 0);
  CHECK(stats.clipped == 0);
  CHECK(stats.loss_sum == doctest::Approx(ref.loss_sum).epsilon(1e-5));
}

TEST_CASE("device: the clipped sum, its clipped and dropped counts match the CPU's") {
  for (Activation act : {Activation::relu, Activation::tanh}) {
    for (float clip : {0.05f, 1.0f, 1000.0f}) {
      CAPTURE(clip);
      const Mlp cpu(spec_of(act), 21);
      auto dev = make(cpu);
      Rows rows = random_rows(cpu.spec(), 200, 9);
      rows.x[17 * cpu.spec().inputs + 3] = std::numeric_limits<float>::quiet_NaN();  // row 17
      dev->upload_rows(rows.x, rows.y);
      std::vector<std::uint32_t> batch(120);
      std::iota(batch.begin(), batch.end(), 0u);
      DeviceDpOptions dp;
      dp.clip_norm = clip;
      dp.noise_multiplier = 0.0;
      dp.expected_batch = 100;
      const auto stats = dev->gradient(batch, 3, dp);
      const CpuStep ref = cpu_step(cpu, rows, batch, dp);
      const std::vector<float> got = download(*dev);
      for (float g : got) REQUIRE(std::isfinite(g));  // the NaN row is out of the sum
      check_close(got, ref.grad);
      CHECK(stats.dropped == 1);
      CHECK(ref.dropped == 1);
      CHECK(stats.clipped == ref.clipped);
      CHECK(stats.correct == ref.correct);
      CHECK(stats.loss_sum == doctest::Approx(ref.loss_sum).epsilon(1e-5));
      if (clip == 0.05f) CHECK(stats.clipped == 119);
      if (clip == 1000.0f) CHECK(stats.clipped == 0);
    }
  }
}

TEST_CASE("device: virtual batches give the one-shot step's sum and counts, noise added once") {
  const Mlp cpu(spec_of(Activation::tanh), 22);
  Rows rows = random_rows(cpu.spec(), 200, 10);
  rows.x[17 * cpu.spec().inputs + 3] = std::numeric_limits<float>::quiet_NaN();  // row 17
  std::vector<std::uint32_t> batch(121);
  std::iota(batch.begin(), batch.end(), 0u);
  DeviceDpOptions dp;
  dp.clip_norm = 0.3f;
  dp.noise_multiplier = 0.5;
  dp.expected_batch = 100;
  dp.seed = 8;
  auto whole = make(cpu);
  whole->upload_rows(rows.x, rows.y);
  const auto ref = whole->gradient(batch, 4, dp);
  const std::vector<float> want = download(*whole);
  for (std::size_t per : {1u, 16u, 120u, 121u, 400u}) {
    CAPTURE(per);
    auto dev = make(cpu);
    dev->upload_rows(rows.x, rows.y);
    DeviceDpOptions pieces = dp;
    pieces.physical_batch = per;
    const auto got = dev->gradient(batch, 4, pieces);
    check_close(download(*dev), want, 1e-4);
    CHECK(got.batch == ref.batch);
    CHECK(got.dropped == 1);
    CHECK(got.clipped == ref.clipped);
    CHECK(got.correct == ref.correct);
    CHECK(got.loss_sum == doctest::Approx(ref.loss_sum).epsilon(1e-5));
  }
}

// Nine layers give the ghost norms 17 matrices to square (passes of kMaxParts = 8, 8 and 1), and
// the clipping 9 output gradients to scale and 9 inputs to zero (passes of 8 and 1 each): every
// part of a full pass, and the passes after it. 2,500 resident rows take the inputs' norms three
// chunks.
TEST_CASE("device: a deep model's clipped sum matches the CPU's, over rows of every chunk") {
  MlpSpec spec;
  spec.inputs = 31;
  spec.hidden = {23, 17, 13, 11, 9, 8, 7, 6};
  spec.classes = 5;
  spec.activation = Activation::tanh;
  const Mlp cpu(spec, 41);
  auto dev = make(cpu);
  Rows rows = random_rows(spec, 2500, 12);
  rows.x[2299 * spec.inputs + 30] = std::numeric_limits<float>::infinity();  // row 2299
  // NaN, unlike infinity, survives tanh: every layer's input row of this example is NaN, and must
  // be zeroed (the infinite row's hidden inputs are finite, tanh(inf) = 1).
  rows.x[2306 * spec.inputs + 4] = std::numeric_limits<float>::quiet_NaN();  // row 2306
  dev->upload_rows(rows.x, rows.y);
  std::vector<std::uint32_t> batch;
  for (std::uint32_t r = 3; r < 2500; r += 7) batch.push_back(r);  // 2299 = 3 + 7 * 328, 2306
  DeviceDpOptions dp;
  dp.clip_norm = 1.3f;
  dp.noise_multiplier = 0.0;
  dp.expected_batch = 350;
  const auto stats = dev->gradient(batch, 1, dp);
  const CpuStep ref = cpu_step(cpu, rows, batch, dp);
  check_close(download(*dev), ref.grad);
  CHECK(stats.dropped == 2);
  CHECK(ref.dropped == 2);
  CHECK(stats.clipped == ref.clipped);
  CHECK(ref.clipped > 0);
  CHECK(ref.clipped + ref.dropped < batch.size());  // some examples are left as they are
  CHECK(stats.loss_sum == doctest::Approx(ref.loss_sum).epsilon(1e-5));
}

TEST_CASE("device: noise is cuRAND's Philox normal stream, keyed by seed, rank and step") {
  const Mlp cpu(spec_of(Activation::relu), 2);
  auto dev = make(cpu);
  const Rows rows = random_rows(cpu.spec(), 10, 1);
  dev->upload_rows(rows.x, rows.y);
  DeviceDpOptions dp;
  dp.clip_norm = 0.5f;
  dp.noise_multiplier = 2.0;
  dp.expected_batch = 1.0;
  dp.seed = 1234;
  dp.rank = 3;
  // An empty batch releases the noise alone.
  dev->gradient({}, 7, dp);
  const std::vector<float> a = download(*dev);
  const std::size_t n = a.size();
  const double sd = dp.noise_multiplier * dp.clip_norm;
  double mean = 0, var = 0;
  for (float v : a) mean += v;
  mean /= static_cast<double>(n);
  for (float v : a) var += (v - mean) * (v - mean);
  var /= static_cast<double>(n - 1);
  CHECK(std::fabs(mean) < 5 * sd / std::sqrt(static_cast<double>(n)));
  CHECK(std::fabs(var / (sd * sd) - 1) < 5 * std::sqrt(2.0 / static_cast<double>(n)));

  // The same stream from cuRAND's host generator under the documented key.
  curandGenerator_t gen;
  REQUIRE(curandCreateGeneratorHost(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10) == CURAND_STATUS_SUCCESS);
  REQUIRE(curandSetPseudoRandomGeneratorSeed(gen, dpg::model::device_noise_key(1234, 3, 7)) ==
          CURAND_STATUS_SUCCESS);
  std::vector<float> host(n + n % 2);
  REQUIRE(curandGenerateNormal(gen, host.data(), host.size(), 0.0f, static_cast<float>(sd)) ==
          CURAND_STATUS_SUCCESS);
  curandDestroyGenerator(gen);
  host.resize(n);
  check_close(a, host, 1e-5);

  // Reproducible; another step, rank or seed gives unrelated noise.
  dev->gradient({}, 7, dp);
  CHECK(download(*dev) == a);
  auto correlation = [&](const std::vector<float>& b) {
    double s = 0;
    for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
    return s / (static_cast<double>(n) * sd * sd);
  };
  for (int which = 0; which < 3; ++which) {
    DeviceDpOptions other = dp;
    long long t = 7;
    if (which == 0) t = 8;
    if (which == 1) other.rank = 2;
    if (which == 2) other.seed = 1235;
    dev->gradient({}, t, other);
    const std::vector<float> b = download(*dev);
    CAPTURE(which);
    CHECK(b != a);
    CHECK(std::fabs(correlation(b)) < 5 / std::sqrt(static_cast<double>(n)));
  }

  // Noise and division by the expected batch size on top of a clipped sum.
  std::vector<std::uint32_t> batch = {0, 1, 2, 3};
  dp.expected_batch = 4;
  dev->gradient(batch, 7, dp);
  const std::vector<float> noised = download(*dev);
  DeviceDpOptions clean = dp;
  clean.noise_multiplier = 0;
  const CpuStep ref = cpu_step(cpu, rows, batch, clean);
  std::vector<float> expect(n);
  for (std::size_t i = 0; i < n; ++i) expect[i] = (ref.grad[i] * 4.0f + a[i]) / 4.0f;
  check_close(noised, expect);
}

TEST_CASE("device: SGD with momentum, weight decay and Nesterov matches the CPU optimiser") {
  for (const bool nesterov : {false, true}) {
    for (const double momentum : {0.0, 0.9}) {
      CAPTURE(nesterov);
      CAPTURE(momentum);
      if (nesterov && momentum == 0.0) continue;
      Mlp cpu(spec_of(Activation::relu), 31);
      auto dev = make(cpu);
      dpg::train::SgdOptions o;
      o.lr = 0.05;
      o.momentum = momentum;
      o.weight_decay = 1e-3;
      o.nesterov = nesterov;
      dpg::train::Sgd sgd(cpu.num_params(), o);
      dpg::model::DeviceSgdOptions d{o.lr, o.momentum, o.weight_decay, o.nesterov};
      dpg::Rng rng(6);
      for (int step = 0; step < 3; ++step) {
        std::vector<float> g(cpu.num_params());
        for (float& v : g) v = static_cast<float>(rng.normal());
        dev->upload_gradient(g);
        dev->sgd_step(d);
        sgd.apply(cpu.params(), dpg::dp::PrivateGradient::from_peer(dpg::arrived(std::span<const float>(g)), 1.0));
      }
      std::vector<float> p(cpu.num_params());
      dev->download_params(p);
      check_close(p, {cpu.params().begin(), cpu.params().end()}, 1e-5);
      if (momentum > 0) {
        std::vector<float> v(cpu.num_params());
        dev->download_momentum(v);
        check_close(v, {sgd.momentum_buffer().begin(), sgd.momentum_buffer().end()}, 1e-5);
      }
    }
  }
}

TEST_CASE("device: staged copies carry each range in order, and back in at an offset") {
  const Mlp cpu(spec_of(Activation::tanh), 12);
  auto dev = make(cpu);
  const std::size_t n = cpu.num_params();
  // Ranges of unequal sizes, out of order and more than the staging slots: each arrives whole,
  // in the order asked, with the device's values.
  const std::vector<std::pair<std::size_t, std::size_t>> ranges = {
      {n - 5, 5}, {0, 1}, {100, 300}, {7, 0}, {1, 99}, {400, n - 405}, {n - 5, 5}};
  std::vector<std::size_t> seen;
  bool equal = true;
  dev->stream_out(dpg::model::DeviceArray::params, ranges,
                  [&](std::size_t offset, std::span<const float> v) {
                    seen.push_back(offset);
                    if (v.size() != ranges[seen.size() - 1].second) equal = false;
                    for (std::size_t i = 0; i < v.size(); ++i) {
                      if (v[i] != cpu.params()[offset + i]) equal = false;
                    }
                  });
  CHECK(equal);
  CHECK(seen == std::vector<std::size_t>{n - 5, 0, 100, 7, 1, 400, n - 5});
  // stream_in at an offset changes that range alone; the gradient array is another array.
  std::vector<float> part(300);
  for (std::size_t i = 0; i < part.size(); ++i) part[i] = static_cast<float>(i) * 0.5f;
  dev->stream_in(dpg::model::DeviceArray::params, 50, part);
  std::vector<float> got(n);
  dpg::model::stream_out_all(*dev, dpg::model::DeviceArray::params, got);
  std::vector<float> want(cpu.params().begin(), cpu.params().end());
  std::copy(part.begin(), part.end(), want.begin() + 50);
  CHECK(got == want);
  std::vector<float> g(n, 0.25f);
  dev->stream_in(dpg::model::DeviceArray::gradient, 0, g);
  std::vector<float> back(n);
  dev->download_gradient(back);
  CHECK(back == g);
  dev->download_params(got);
  CHECK(got == want);
  CHECK_THROWS_AS(dev->stream_in(dpg::model::DeviceArray::params, n - 1, part), dpg::Error);
}

TEST_CASE("device: mixing the neighbour buffers is collective::mix_range's arithmetic") {
  const Mlp cpu(spec_of(Activation::relu), 13);
  auto dev = make(cpu);
  const std::size_t n = cpu.num_params();
  dpg::Rng rng(3);
  std::vector<std::vector<float>> models(3, std::vector<float>(n));
  for (auto& m : models) {
    for (float& v : m) v = static_cast<float>(rng.normal());
  }
  const std::vector<float*> bufs = dev->neighbour_buffers(3);
  REQUIRE(bufs.size() == 3);
  // As a receive would: straight into the device buffers.
  for (std::size_t k = 0; k < 3; ++k) to_device(bufs[k], models[k]);
  const std::vector<float> weights = {0.25f, 0.125f, 0.3f};
  dev->mix_params(0.325f, weights);
  std::vector<float> want(n);
  const std::vector<std::span<const float>> pieces(models.begin(), models.end());
  dpg::collective::mix_range(want, 0.325f, cpu.params(), weights, pieces, 0, n);
  std::vector<float> got(n);
  dev->download_params(got);
  check_same_arithmetic(got, want);
  // Fewer neighbours than buffers: the first ones; more: refused.
  dev->upload_params(cpu.params());
  dev->mix_params(0.5f, std::span<const float>(weights).first(1));
  dpg::collective::mix_range(want, 0.5f, cpu.params(), std::span<const float>(weights).first(1),
                             std::span(pieces).first(1), 0, n);
  dev->download_params(got);
  check_same_arithmetic(got, want);
  const std::vector<float> four(4, 0.1f);
  CHECK_THROWS_AS(dev->mix_params(0.6f, four), dpg::Error);
}

TEST_CASE("device: the moving average is ParamAverage's, and starts at the model's parameters") {
  Mlp cpu(spec_of(Activation::relu), 14);
  auto dev = make(cpu);
  dpg::train::ParamAverage avg(cpu.params(), 0.9);
  dpg::Rng rng(8);
  for (int step = 0; step < 3; ++step) {
    for (float& v : cpu.params()) v += 0.1f * static_cast<float>(rng.normal());
    dev->upload_params(cpu.params());
    dev->average_step(static_cast<float>(avg.decay()));
    avg.update(cpu.params());
  }
  std::vector<float> got(cpu.num_params());
  dpg::model::stream_out_all(*dev, dpg::model::DeviceArray::average, got);
  check_same_arithmetic(got, {avg.values().begin(), avg.values().end()});
}

TEST_CASE("device: a row index past the resident rows, or a label out of range, is refused") {
  const Mlp cpu(spec_of(Activation::relu), 1);
  auto dev = make(cpu);
  Rows rows = random_rows(cpu.spec(), 20, 2);
  dev->upload_rows(rows.x, rows.y);
  const std::vector<std::uint32_t> bad = {3, 20};
  CHECK_THROWS_WITH_AS(dev->gradient(bad, 0, {}), doctest::Contains("batch row 20 of 20"),
                       dpg::Error);
  rows.y[5] = 7;
  CHECK_THROWS_WITH_AS(dev->upload_rows(rows.x, rows.y), doctest::Contains("label 7 of row 5"),
                       dpg::Error);
  std::vector<float> wrong(cpu.num_params() + 1);
  CHECK_THROWS_AS(make_with(cpu.spec(), wrong), dpg::Error);
}

#ifdef DPG_TEST_CUDA
int main(int argc, char** argv) {
  std::string why;
  if (dpg::model::cuda_device_count(&why) == 0) {
    std::printf("skipped: no CUDA device here (%s)\n", why.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
#endif
