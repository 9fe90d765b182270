// The trainer's device path (--device cuda) on the device backend's host instance
// (model::make_host_thrust_mlp: the same source as the CUDA one, Thrust's C++ backend): the
// device computes the released gradient and, for the algorithms that update on the device (all
// but the parameter servers and AD-PSGD), keeps the model; test_device_resident.cc tests that.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "apps/device_setup.h"
#include "runtime/core/error.h"
#include "runtime/model/device_mlp.h"
#include "tests/unit/train/peers.h"

namespace {

using namespace dpg;

// Every rank on the device backend's host instance, or only the ranks in `device_ranks`.
std::vector<test::PeerResult> run(const TrainConfig& c, int world,
                                  std::vector<int> device_ranks = {0, 1, 2, 3}) {
  auto on_device = [device_ranks](int r) {
    return std::find(device_ranks.begin(), device_ranks.end(), r) != device_ranks.end();
  };
  return test::run_peers(
      world, c, 400, {}, std::chrono::seconds(20), {},
      [&](int r, train::RunInputs& t) {
        if (!on_device(r)) return;
        t.backends.device = [](const model::MlpSpec& spec, std::span<const float> params, int) {
          return model::make_host_thrust_mlp(spec, params);
        };
        t.backends.direct = app::device_backends(t.config).direct;  // NCCL's, as train's
      },
      [&](int r) {
        TrainConfig mine = c;
        mine.device = on_device(r) ? "cuda" : "cpu";
        return mine;
      });
}

}  // namespace

TEST_CASE("device path: a non-private all-reduce run trains to the CPU run's model") {
  TrainConfig c = test::small_config(Algo::allreduce);
  c.dp = false;
  c.epochs = 2;
  c.lr = 0.3;
  c.momentum = 0.5;
  const auto dev = run(c, 2);
  const auto cpu = run(c, 2, {});
  for (int r = 0; r < 2; ++r) {
    REQUIRE(dev[r].error == "");
    REQUIRE(cpu[r].error == "");
  }
  CHECK(dev[0].params == dev[1].params);  // the replicas agree
  // Only the summation order differs (Thrust's loops and the CPU's vector kernels).
  CHECK(test::max_abs_diff(dev[0].params, cpu[0].params) < 1e-4 * test::max_abs(cpu[0].params));
  CHECK(dev[0].summary.test_accuracy == doctest::Approx(cpu[0].summary.test_accuracy).epsilon(0.01));
}

TEST_CASE("device path: DP-SGD spends the CPU run's epsilon and learns as well") {
  TrainConfig c = test::small_config(Algo::allreduce);
  const auto dev = run(c, 2);
  const auto cpu = run(c, 2, {});
  for (int r = 0; r < 2; ++r) {
    REQUIRE(dev[r].error == "");
    REQUIRE(cpu[r].error == "");
  }
  CHECK(dev[0].params == dev[1].params);
  CHECK(dev[0].params != cpu[0].params);  // Philox noise on the device, not the CPU's
  CHECK(dev[0].summary.epsilon == cpu[0].summary.epsilon);
  CHECK(dev[0].summary.epsilon > 0);
  CHECK(dev[0].summary.test_accuracy > 0.8);
  CHECK(cpu[0].summary.test_accuracy > 0.8);
}

TEST_CASE("device path: a bucketed all-reduce gets the device's gradient in the CPU's pieces") {
  // Rank 0 on the device, rank 1 on the CPU: both must form the same buckets, or the sums would
  // not line up (or the run would stall on mismatched sizes).
  TrainConfig c = test::small_config(Algo::allreduce);
  c.hidden = {16, 16};
  c.epochs = 1;
  c.bucket_bytes = 256;
  const auto res = run(c, 2, {0});
  REQUIRE(res[0].error == "");
  REQUIRE(res[1].error == "");
  CHECK(res[0].params == res[1].params);
  CHECK(res[0].summary.test_accuracy > 0.6);
}

TEST_CASE("device path: gossip on the device keeps the graph algorithm's reports") {
  TrainConfig c = test::small_config(Algo::gossip);
  c.epochs = 2;
  const auto res = test::run_peers(
      3, c, 400, test::graph_phases("ring", 3), std::chrono::seconds(20), {},
      [](int, train::RunInputs& t) {
        t.backends.device = [](const model::MlpSpec& spec, std::span<const float> params, int) {
          return model::make_host_thrust_mlp(spec, params);
        };
      },
      [&](int) {
        TrainConfig mine = c;
        mine.device = "cuda:0";
        return mine;
      });
  for (const auto& r : res) REQUIRE(r.error == "");
  CHECK(res[0].summary.test_accuracy > 0.8);
  CHECK(res[0].summary.epsilon > 0);
}

TEST_CASE("device path: secure noise and secure aggregation are refused; no GPU names the rank") {
  TrainConfig c = test::small_config(Algo::allreduce);
  c.device = "cuda";
  c.noise_seed = 0;
  c.secure_noise = true;
  auto res = test::run_peers(2, c, 100);
  CHECK(res[0].error.find("/device: cuda draws Philox noise on the GPU; secure_noise") !=
        std::string::npos);
  c.secure_noise = false;
  c.secure_aggregation = true;
  res = test::run_peers(2, c, 100);
  CHECK(res[1].error.find("secure_aggregation draws its noise on the CPU") != std::string::npos);
  c.device = "gpu";
  CHECK_THROWS_WITH_AS(validate(c), doctest::Contains("/device: expected cpu, cuda or cuda:N"),
                       Error);
  std::string why;
  if (model::cuda_device_count(&why) == 0) {
    c.secure_aggregation = false;
    c.device = "cuda:1";
    c.noise_seed = 7;
    // The backends `dpgossip train` hands its runs.
    res = test::run_peers(2, c, 100, {}, std::chrono::seconds(5), {},
                          [](int, train::RunInputs& in) { in.backends = app::device_backends(in.config); });
    for (int r = 0; r < 2; ++r) {
      CAPTURE(res[r].error);
      CHECK(res[r].error != "");
    }
    // Each peer names itself; neither hangs (the run_peers timeout bounds the wait).
    CHECK(res[0].error.find("rank 0 asked for cuda:1") != std::string::npos);
  } else {
    MESSAGE("a GPU is present: the no-GPU error is not exercised");
  }
}

TEST_CASE("device path: --transport nccl needs device cuda and allreduce, local-sgd or gossip") {
  TrainConfig c = test::small_config(Algo::allreduce);
  c.transport = TransportMode::nccl;
  auto res = test::run_peers(2, c, 100);
  CHECK(res[0].error.find("/transport: nccl reduces on the GPU of device cuda") != std::string::npos);
  c.device = "cuda";
  c.algo = Algo::ad_psgd;
  res = test::run_peers(2, c, 100, test::graph_phases("ring", 2));
  CHECK(res[0].error.find("/transport: nccl carries the messages of allreduce, gossip or "
                          "local-sgd only, not ad-psgd's") != std::string::npos);
  c.algo = Algo::allreduce;
  c.bucket_bytes = 1024;
  res = test::run_peers(2, c, 100);
  CHECK(res[1].error.find("not with bucket_bytes") != std::string::npos);
  std::string why;
  if (model::cuda_device_count(&why) == 0) {
    // On the device backend's host instance the NCCL set-up itself names the missing GPU, on
    // every rank, without a hang.
    c.bucket_bytes = 0;
    res = run(c, 2);
    for (int r = 0; r < 2; ++r) {
      CAPTURE(res[r].error);
      CHECK(res[r].error.find("nccl") != std::string::npos);
    }
  }
}
