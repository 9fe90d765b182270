// Gradient bucketing: the mechanism's range-by-range release equals the whole release bit for
// bit, the layer-by-layer private gradient equals the one-pass one, the bucket reducer sums every
// value over the peers whatever the bucket size, and a bucketed all-reduce run trains to the model
// of the unbucketed one (up to float summation order).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <thread>
#include <vector>

#include "dp/mechanism.h"
#include "runtime/collective/communicator.h"
#include "runtime/core/error.h"
#include "runtime/model/mlp.h"
#include "runtime/net/inproc/inproc_transport.h"
#include "runtime/train/bucket_reducer.h"
#include "runtime/train/gradient.h"
#include "tests/unit/train/peers.h"

namespace {

using namespace dpg;

dp::MechanismOptions noisy() {
  return {.enabled = true, .clip_norm = 0.7f, .noise_multiplier = 1.3, .expected_batch = 9.0};
}

void fill(std::span<float> v) {
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 17) * 0.25f - 1.0f;
}

TrainConfig config(long long bucket_bytes) {
  TrainConfig c = test::small_config(Algo::allreduce);
  c.hidden = {16, 16};  // layers of 144, 272 and 51 values
  c.epochs = 2;
  c.lr = 0.5;
  c.momentum = 0.9;
  c.noise_seed = 11;
  c.bucket_bytes = bucket_bytes;
  return c;
}

}  // namespace

TEST_CASE("mechanism: noising range by range gives the whole release's values exactly") {
  // 1000 values: ranges cut the noise's 256-value blocks anywhere, including inside a block's
  // cosine half, across its sine half, and a last partial block. Released last range first.
  const std::size_t n = 1000;
  for (int step = 0; step < 2; ++step) {
    dp::GaussianMechanism whole(n, noisy(), 5, 3), parts(n, noisy(), 5, 3);
    for (int s = 0; s <= step; ++s) {  // the second pass checks the second step's key as well
      fill(whole.begin_step());
      fill(parts.begin_step());
      const auto w = whole.release();
      const std::size_t cuts[] = {0, 3, 100, 128, 300, 511, 512, 513, 777, 1000};
      std::vector<float> got(n);
      for (int k = 8; k >= 0; --k) {
        const auto p = parts.release_range(cuts[k], cuts[k + 1]);
        CHECK(p.noise_multiplier() == w.noise_multiplier());
        std::copy(p.values().begin(), p.values().end(), got.begin() + cuts[k]);
      }
      const auto rest = parts.release();  // nothing left to noise: the same values
      CHECK(std::equal(rest.values().begin(), rest.values().end(), got.begin()));
      CHECK(std::equal(w.values().begin(), w.values().end(), got.begin()));
    }
  }
}

TEST_CASE("mechanism: release() noises only what release_range() left; a value is released once") {
  const std::size_t n = 600;
  dp::GaussianMechanism whole(n, noisy(), 8, 0), parts(n, noisy(), 8, 0);
  fill(whole.begin_step());
  fill(parts.begin_step());
  parts.release_range(200, 300);
  CHECK_THROWS_AS(parts.release_range(250, 260), Error);
  parts.release_range(500, 600);
  const auto a = whole.release();
  const auto b = parts.release();
  CHECK(std::equal(a.values().begin(), a.values().end(), b.values().begin()));
  // A part of a released gradient, and two adjacent parts joined, are views of the same values.
  const auto lo = b.part(0, 10), hi = b.part(10, 5);
  CHECK(dp::PrivateGradient::join(lo, hi).values().data() == b.values().data());
  CHECK(dp::PrivateGradient::join(lo, hi).values().size() == 15);
  CHECK_THROWS_AS(dp::PrivateGradient::join(hi, lo), Error);
  CHECK_THROWS_AS(b.part(590, 11), Error);
}

TEST_CASE("private_gradient: layer by layer through a sink equals the one-pass gradient") {
  model::MlpSpec spec;
  spec.inputs = 8;
  spec.hidden = {16, 16};
  spec.classes = 3;
  const model::Mlp m(spec, 4);
  const data::Dataset d = test::blobs(40, 2);
  std::vector<std::int32_t> labels(d.labels.begin(), d.labels.end());
  dp::GaussianMechanism one(m.num_params(), noisy(), 3, 1), streamed(m.num_params(), noisy(), 3, 1);
  model::Workspace ws;
  train::StepBuffers buffers;
  train::StepStats stats;
  auto load = [&] {
    ws.resize(spec, labels.size());
    std::copy(d.features.begin(), d.features.end(), ws.input().begin());
  };
  load();
  const auto a = train::private_gradient(m, ws, labels, one, buffers, stats);
  std::vector<std::size_t> offsets;
  std::size_t seen = 0;
  load();
  const auto b = train::private_gradient(
      m, ws, labels, streamed, buffers, stats,
      [&](const dp::PrivateGradient& part, std::size_t offset) {
        offsets.push_back(offset);
        seen += part.values().size();
      });
  CHECK(std::equal(a.values().begin(), a.values().end(), b.values().begin()));
  // From the end down: each layer's bias, then its weights (16 x 16, 16 x 8 and 3 x 16).
  CHECK(offsets == std::vector<std::size_t>{464, 416, 400, 144, 128, 0});
  CHECK(seen == m.num_params());

  // In blocks of rows of about 40 values: 2 rows of 16 (W_2: 3 rows), 2 rows of 16, 5 rows of 8.
  dp::GaussianMechanism blocks(m.num_params(), noisy(), 3, 1);
  offsets.clear();
  seen = 0;
  load();
  const auto c = train::private_gradient(
      m, ws, labels, blocks, buffers, stats,
      [&](const dp::PrivateGradient& part, std::size_t offset) {
        CHECK(offset + part.values().size() == m.num_params() - seen);  // just below the last
        offsets.push_back(offset);
        seen += part.values().size();
      },
      40);
  CHECK(seen == m.num_params());
  CHECK(offsets.size() == 3 + 2 + 8 + 4);  // biases; W_2 in 2 blocks, W_1 in 8, W_0 in 4
  float diff = 0;
  for (std::size_t i = 0; i < m.num_params(); ++i) {
    diff = std::max(diff, std::abs(a.values()[i] - c.values()[i]));
  }
  CHECK(diff < 1e-6f);  // a block of rows is its own matrix product: only the float order differs
}

TEST_CASE("bucket reducer: every value summed over the peers, in ceil(n / bucket) buckets") {
  // Layers of 144, 272 and 51 values handed over last first, as private_gradient does; rank r
  // holds (r + 1)(i % 97 + 1) at i, so the sum over 4 peers is 10 (i % 97 + 1), exact in floats.
  const std::size_t layers[][2] = {{416, 467}, {144, 416}, {0, 144}};
  const int world = 4;
  for (std::size_t bucket_values : {10, 350, 100000}) {
    CAPTURE(bucket_values);
    net::InprocFabric fabric(world, std::chrono::seconds(10));
    std::vector<std::vector<float>> results(world);
    std::vector<long long> buckets(world);
    std::vector<std::string> errors(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        try {
          collective::Communicator comm(fabric.peer(r));
          dp::GaussianMechanism mech(467, {.enabled = false, .expected_batch = 1.0}, 1, r);
          train::BucketReducer reducer(comm, mech, bucket_values * sizeof(float));
          for (int step = 0; step < 2; ++step) {
            auto acc = mech.begin_step();
            for (std::size_t i = 0; i < acc.size(); ++i) {
              acc[i] = static_cast<float>((r + 1) * (i % 97 + 1));
            }
            for (const auto& l : layers) {
              reducer.add(step, mech.release_range(l[0], l[1]), l[0]);
            }
            reducer.wait();
            comm.barrier();  // the training thread's own collective, numbered from round 0 too
          }
          const auto all = mech.release();
          results[r].assign(all.values().begin(), all.values().end());
          buckets[r] = reducer.buckets();
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) {
      REQUIRE(errors[r] == "");
      CHECK(buckets[r] == 2 * static_cast<long long>((467 + bucket_values - 1) / bucket_values));
      for (std::size_t i = 0; i < 467; ++i) {
        REQUIRE(results[r][i] == static_cast<float>(10 * (i % 97 + 1)));
      }
    }
  }
}

TEST_CASE("all-reduce with buckets trains to the unbucketed all-reduce's model") {
  const auto plain = test::run_peers(4, config(0), 400);
  for (const auto& p : plain) REQUIRE(p.error == "");
  // Buckets smaller than a layer (10 values), several layers per bucket (350 values: the last two
  // layers and part of the first), and one bucket bigger than the whole gradient.
  const std::pair<long long, long long> cases[] = {{40, 47}, {1400, 2}, {1 << 20, 1}};
  for (const auto& [bytes, per_step] : cases) {
    CAPTURE(bytes);
    const auto b = test::run_peers(4, config(bytes), 400);
    for (const auto& p : b) REQUIRE(p.error == "");
    CHECK(b[0].summary.extra["buckets"] == 20 * per_step);  // 20 steps of ceil(467 / bucket)
    for (const auto& p : b) CHECK(p.params == b[0].params);  // every replica the same
    float d = 0;
    for (std::size_t i = 0; i < b[0].params.size(); ++i) {
      d = std::max(d, std::abs(b[0].params[i] - plain[0].params[i]));
    }
    MESSAGE(bytes << "-byte buckets: largest difference " << d);
    // Only the order of the float additions may differ; at these sizes every all-reduce takes
    // recursive doubling, whose order does not depend on the length, so it is even exact.
    CHECK(d < 2e-5f);
    CHECK(b[0].summary.epsilon == plain[0].summary.epsilon);
  }
}

TEST_CASE("all-reduce with buckets on three peers (the ring: another summation order)") {
  const auto plain = test::run_peers(3, config(0), 400);
  const auto b = test::run_peers(3, config(40), 400);
  for (const auto& p : plain) REQUIRE(p.error == "");
  for (const auto& p : b) REQUIRE(p.error == "");
  for (const auto& p : b) CHECK(p.params == b[0].params);
  float d = 0;
  for (std::size_t i = 0; i < b[0].params.size(); ++i) {
    d = std::max(d, std::abs(b[0].params[i] - plain[0].params[i]));
  }
  MESSAGE("three peers, 40-byte buckets: largest difference " << d);
  CHECK(d < 2e-5f);
}
