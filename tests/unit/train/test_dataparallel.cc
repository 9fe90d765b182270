// Data-parallel DP-SGD over the all-reduce equals one process over the union of the batches:
// with the noise off and the same examples, N replicas and one model agree up to float
// summation order, and the replicas agree with each other bit for bit.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "dp/mechanism.h"
#include "runtime/collective/communicator.h"
#include "runtime/core/rng.h"
#include "runtime/model/mlp.h"
#include "runtime/net/inproc/inproc_transport.h"
#include "runtime/train/gradient.h"
#include "runtime/train/optimizer.h"

namespace {

using namespace dpg;

constexpr int kCols = 12, kClasses = 4, kSteps = 5;

model::MlpSpec spec() {
  model::MlpSpec s;
  s.inputs = kCols;
  s.hidden = {16};
  s.classes = kClasses;
  s.activation = model::Activation::tanh;
  return s;
}

struct Batch {
  std::vector<float> x;             // (rows, kCols)
  std::vector<std::int32_t> labels;  // (rows)
};

// Peer p's batch at step t: sizes differ between peers, and one peer's can be empty.
Batch batch_of(int peer, int step) {
  Rng rng(1000 * step + peer);
  const int rows = (peer * 7 + step * 3) % 11;
  Batch b;
  for (int i = 0; i < rows; ++i) {
    b.labels.push_back(static_cast<std::int32_t>(rng.below(kClasses)));
    for (int j = 0; j < kCols; ++j) b.x.push_back(static_cast<float>(2 * rng.normal()));
  }
  return b;
}

dp::MechanismOptions mechanism_options() {
  // Clipping on (C small enough to bind), noise off, public expected batch of 20.
  return {.enabled = true, .clip_norm = 0.5f, .noise_multiplier = 0.0, .expected_batch = 20.0};
}

void step(model::Mlp& m, dp::GaussianMechanism& mech, train::Sgd& sgd, const Batch& b,
          collective::Communicator* comm) {
  model::Workspace ws;
  ws.resize(m.spec(), b.labels.size());
  std::copy(b.x.begin(), b.x.end(), ws.input().begin());
  train::StepBuffers buffers;
  train::StepStats stats;
  const dp::PrivateGradient mine = train::private_gradient(m, ws, b.labels, mech, buffers, stats);
  const dp::PrivateGradient g =
      comm ? mech.exchange(mine, [&](Wire<float> v) { comm->allreduce(v); }) : mine;
  sgd.apply(m.params(), g);
}

}  // namespace

TEST_CASE("N-peer all-reduce DP-SGD with noise off equals one peer over the union of batches") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    // One process over the union.
    model::Mlp single(spec(), 7);
    dp::GaussianMechanism single_mech(single.num_params(), mechanism_options(), 1, 0);
    train::Sgd single_sgd(single.num_params(), {.lr = 0.5, .momentum = 0.9});
    for (int t = 0; t < kSteps; ++t) {
      Batch all;
      for (int p = 0; p < n; ++p) {
        Batch b = batch_of(p, t);
        all.x.insert(all.x.end(), b.x.begin(), b.x.end());
        all.labels.insert(all.labels.end(), b.labels.begin(), b.labels.end());
      }
      step(single, single_mech, single_sgd, all, nullptr);
    }
    // N replicas in lockstep over the in-process transport.
    net::InprocFabric fabric(n);
    std::vector<std::vector<float>> replicas(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        collective::Communicator comm(fabric.peer(r), {.segment_bytes = 64});
        model::Mlp m(spec(), 7);
        dp::GaussianMechanism mech(m.num_params(), mechanism_options(), 1, r);
        train::Sgd sgd(m.num_params(), {.lr = 0.5, .momentum = 0.9});
        for (int t = 0; t < kSteps; ++t) step(m, mech, sgd, batch_of(r, t), &comm);
        replicas[r].assign(m.params().begin(), m.params().end());
      });
    }
    for (auto& th : threads) th.join();
    for (int r = 1; r < n; ++r) {
      REQUIRE(std::memcmp(replicas[r].data(), replicas[0].data(),
                          replicas[0].size() * sizeof(float)) == 0);
    }
    double max_diff = 0, max_abs = 0;
    for (std::size_t i = 0; i < replicas[0].size(); ++i) {
      max_diff = std::max(max_diff, double(std::fabs(replicas[0][i] - single.params()[i])));
      max_abs = std::max(max_abs, double(std::fabs(single.params()[i])));
    }
    CHECK(max_diff <= 1e-5 * std::max(1.0, max_abs));
    // ...and the updates were not trivial: the model moved away from its initialisation.
    model::Mlp init(spec(), 7);
    double moved = 0;
    for (std::size_t i = 0; i < replicas[0].size(); ++i) {
      moved = std::max(moved, double(std::fabs(replicas[0][i] - init.params()[i])));
    }
    CHECK(moved > 1e-2);
  }
}

TEST_CASE("private_gradient: a dropped example counts in neither the loss nor the accuracy") {
  // Rows 1 and 3 hold a NaN: their logits are NaN, whose argmax is class 0, their label; counted
  // correct, the accuracy over the kept rows could pass 100%.
  model::Mlp m(spec(), 7);
  dp::GaussianMechanism mech(m.num_params(), mechanism_options(), 1, 0);
  Batch b;
  Rng rng(5);
  for (int i = 0; i < 6; ++i) {
    b.labels.push_back(0);
    for (int j = 0; j < kCols; ++j) b.x.push_back(static_cast<float>(rng.normal()));
  }
  b.x[1 * kCols] = b.x[3 * kCols + 2] = std::nanf("");
  model::Workspace ws;
  ws.resize(m.spec(), b.labels.size());
  std::copy(b.x.begin(), b.x.end(), ws.input().begin());
  train::StepBuffers buffers;
  train::StepStats stats;
  (void)train::private_gradient(m, ws, b.labels, mech, buffers, stats);
  CHECK(stats.dropped == 2);
  // The kept rows alone, through the same model: the same correct count and loss.
  Batch kept;
  for (int i : {0, 2, 4, 5}) {
    kept.labels.push_back(0);
    kept.x.insert(kept.x.end(), b.x.begin() + i * kCols, b.x.begin() + (i + 1) * kCols);
  }
  model::Workspace wk;
  wk.resize(m.spec(), kept.labels.size());
  std::copy(kept.x.begin(), kept.x.end(), wk.input().begin());
  m.forward(wk);
  const std::size_t correct = m.loss_and_backward(kept.labels, wk, false);
  double loss = 0;
  for (float l : wk.loss) loss += l;
  CHECK(stats.correct == correct);
  CHECK(stats.correct <= stats.batch - stats.dropped);
  CHECK(stats.loss_sum == doctest::Approx(loss));
}
