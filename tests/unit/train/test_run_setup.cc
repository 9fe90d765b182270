// The run's set-up (runtime/train/run_setup.h): check_run refuses what an algorithm's table line
// does not allow, for every algorithm, and nothing else lists algorithms.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "runtime/core/error.h"
#include "runtime/net/inproc/inproc_transport.h"
#include "runtime/train/algorithm.h"
#include "runtime/train/run_setup.h"
#include "runtime/train/run_state.h"
#include "tests/unit/train/peers.h"

namespace {

using namespace dpg;

// The error check_run gives `c` (one peer, a small shard), or "".
std::string refusal(const TrainConfig& c) {
  train::RunInputs in;
  in.config = c;
  in.data.train = test::blobs(50, 1);
  try {
    train::check_run(in);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("run set-up: each algorithm's line decides what it allows") {
  int allowing_secagg = 0, allowing_independent = 0, allowing_nccl = 0;
  for (std::size_t a = 0; a < std::size(EnumNames<Algo>::names); ++a) {
    const Algo algo = static_cast<Algo>(a);
    const train::AlgoInfo& line = train::algo_info(algo);
    CAPTURE(to_string(algo));
    CHECK(line.algo == algo);
    TrainConfig c = test::small_config(algo);
    CHECK(refusal(c) == "");

    TrainConfig independent = c;
    independent.init = Init::independent;
    const std::string init_error = refusal(independent);
    CHECK((init_error.find("/init: independent needs") != std::string::npos) ==
          !line.independent_init);
    allowing_independent += line.independent_init;

    TrainConfig secagg = c;
    secagg.secure_aggregation = true;
    secagg.noise_seed = 0;
    const std::string secagg_error = refusal(secagg);
    CHECK((secagg_error.find("/secure_aggregation: only with algo") != std::string::npos) ==
          !line.secure_aggregation);
    if (line.secure_aggregation) CHECK(secagg_error == "");
    allowing_secagg += line.secure_aggregation;

    TrainConfig nccl = c;
    nccl.transport = TransportMode::nccl;
    nccl.device = "cuda";
    const std::string nccl_error = refusal(nccl);
    CHECK((nccl_error.find("/transport: nccl carries the messages of") != std::string::npos) ==
          !line.nccl);
    // Allowed, the run still needs the GPU backend apps/ hands in.
    if (line.nccl) CHECK(nccl_error.find("no GPU backend was handed") != std::string::npos);
    allowing_nccl += line.nccl;
  }
  // The facts docs/ARCHITECTURE.md states: masks cancel only in allreduce's flat sum; the graph
  // algorithms and the partial all-reduce mix independent starts; NCCL carries allreduce's,
  // local-sgd's and gossip's.
  CHECK(allowing_secagg == 1);
  CHECK(train::algo_info(Algo::allreduce).secure_aggregation);
  CHECK(allowing_independent == 3);
  CHECK(allowing_nccl == 3);
  CHECK(refusal([] {
          TrainConfig c = test::small_config(Algo::ps_sync);
          c.transport = TransportMode::nccl;
          c.device = "cuda";
          return c;
        }()) == "/transport: nccl carries the messages of allreduce, gossip or local-sgd only, "
                "not ps-sync's (use auto, tcp or shm)");
}

TEST_CASE("run set-up: secure noise is refused where the peers' shares of it would be summed") {
  // Two peers: distributed noise under a summed release would sum two discrete Gaussians.
  net::InprocFabric fabric(2, std::chrono::seconds(1));
  collective::Communicator comm(fabric.peer(0));
  const auto refused = [&comm](TrainConfig c) {
    train::RunInputs in;
    in.config = std::move(c);
    in.data.train = test::blobs(50, 1);
    in.comm = &comm;
    try {
      train::check_run(in);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  for (Algo algo : {Algo::allreduce, Algo::ps_sync}) {
    CAPTURE(to_string(algo));
    TrainConfig c = test::small_config(algo);
    c.secure_noise = true;
    c.noise_seed = 0;
    CHECK(refused(c).find("/secure_noise: with " + to_string(algo) + "'s distributed noise each "
                          "of the 2 peers") != std::string::npos);
    TrainConfig local = c;  // each peer adds the whole noise: one discrete Gaussian each
    local.noise_mode = NoiseMode::local;
    CHECK(refused(local) == "");
    TrainConfig messages = c;  // calibrated for the messages: local noise as well
    messages.target = PrivacyTarget::messages;
    CHECK(refused(messages) == "");
  }
  TrainConfig secagg = test::small_config(Algo::allreduce);
  secagg.secure_noise = secagg.secure_aggregation = true;
  secagg.noise_seed = 0;
  CHECK(refused(secagg) == "");
  TrainConfig gossip = test::small_config(Algo::gossip);
  gossip.secure_noise = true;
  gossip.noise_seed = 0;
  CHECK(refused(gossip) == "");
  // One peer: its noise is the model's, one discrete Gaussian.
  TrainConfig alone = test::small_config(Algo::allreduce);
  alone.secure_noise = true;
  alone.noise_seed = 0;
  CHECK(refusal(alone) == "");
}

TEST_CASE("run set-up: the audit's sum hook needs the whole sum and the CPU") {
  train::RunInputs in;
  in.config = test::small_config(Algo::allreduce);
  in.config.bucket_bytes = 4096;
  in.data.train = test::blobs(50, 1);
  in.hooks.sum = [](long long, std::span<float>) {};
  CHECK_THROWS_WITH_AS(train::check_run(in), doctest::Contains("hands its gradient over in parts"),
                       Error);
  in.config.bucket_bytes = 0;
  CHECK_NOTHROW(train::check_run(in));
  in.config.device = "cuda";
  CHECK_THROWS_WITH_AS(train::check_run(in),
                       doctest::Contains("the audit's canaries join the clipped sum on the CPU"),
                       Error);
}

TEST_CASE("run set-up: an empty shard and a missing validation split name what is missing") {
  train::RunInputs in;
  in.config = test::small_config(Algo::single);
  CHECK_THROWS_WITH_AS(train::check_run(in), doctest::Contains("training shard is empty"), Error);
  in.data.train = test::blobs(50, 1);
  in.config.eval_split = EvalSplit::validation;
  CHECK_THROWS_WITH_AS(train::check_run(in), doctest::Contains("holds no validation rows"), Error);
}

TEST_CASE("run set-up: server ranks with one peer are refused, not ignored") {
  TrainConfig c = test::small_config(Algo::ps_sync);
  CHECK(refusal(c) == "");
  c.servers = 2;
  CHECK(refusal(c).find("/servers: 2 server ranks, but this run has one peer") !=
        std::string::npos);
}

TEST_CASE("run set-up: buckets too small to be worth an all-reduce each are refused, naming the least") {
  TrainConfig c = test::small_config(Algo::allreduce);
  c.hidden = {256, 256};  // more than 1024 parameters, so one-value buckets are too many
  const auto w = train::spec_for(c, test::blobs(50, 1)).widths();
  long long params = 0;
  for (std::size_t l = 0; l + 1 < w.size(); ++l) params += (w[l] + 1LL) * w[l + 1];
  // The least size that keeps a step's buckets at 1024 passes; four bytes fewer does not.
  const long long least = (params + 1023) / 1024 * 4;
  c.bucket_bytes = least;
  CHECK(refusal(c) == "");
  c.bucket_bytes = least - 4;
  CHECK(refusal(c).find("/bucket_bytes: buckets of " + std::to_string(least - 4) + " bytes") !=
        std::string::npos);
  c.bucket_bytes = 1;
  const std::string why = refusal(c);
  CHECK(why.find("into " + std::to_string(params) + " all-reduces a step; at most 1024") !=
        std::string::npos);
  CHECK(why.find("give at least " + std::to_string(least) + " bytes") != std::string::npos);
}

TEST_CASE("virtual batches by memory: the most rows that fit, the workspace within the cap") {
  const model::MlpSpec spec{784, {256}, 10, Activation::tanh};
  // A row: 784 + 256 + 10 activations, 256 + 10 output gradients, loss and two norms.
  CHECK(model::Workspace::row_bytes(spec) == 4u * (784 + 256 + 10 + 256 + 10 + 3));
  TrainConfig c;
  CHECK(train::physical_rows(c, spec) == 0);  // the whole batch
  c.physical_batch = 100;
  CHECK(train::physical_rows(c, spec) == 100);
  c.batch_memory_mib = 1;
  CHECK(train::physical_rows(c, spec) == 100);  // the smaller of the two
  c.physical_batch = 0;
  const std::size_t rows = train::physical_rows(c, spec);
  CHECK(rows == static_cast<std::size_t>(1048576 / train::pass_row_bytes(spec)));
  CHECK(rows > 150);
  // The buffers of a pass of that many rows, headroom included, stay within the mebibyte.
  model::Workspace ws;
  ws.resize(spec, rows);
  std::size_t bytes = (ws.loss.size() + ws.act_sq.size() + ws.grad_sq.size()) * sizeof(float);
  for (const auto& a : ws.act) bytes += a.size() * sizeof(float);
  for (const auto& g : ws.grad) bytes += g.size() * sizeof(float);
  bytes += rows * (2 * sizeof(float) + sizeof(std::int32_t));  // norms, factors, labels
  CHECK(bytes <= 1048576);
  CHECK(bytes > 1048576 - static_cast<std::size_t>(2 * train::pass_row_bytes(spec)));
  // A cap that holds no row is refused, naming the field and a row's size.
  train::RunInputs in;
  in.config.algo = Algo::single;
  in.config.batch_memory_mib = 0.001;
  in.config.batch_size = 8;
  in.data.train = test::blobs(64, 1);
  in.data.test = test::blobs(16, 2);
  in.config.hidden = {1 << 16};
  CHECK_THROWS_WITH_AS(train::check_run(in), doctest::Contains("/batch_memory_mib"), Error);
}
