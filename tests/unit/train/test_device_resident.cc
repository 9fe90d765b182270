// Device-resident training (runtime/train/algorithm.h, "Device-resident training") on the device
// backend's host instance: the model, its momentum and gradient stay on the device, and only what
// goes on the wire leaves it. The direct path (collectives on the device's memory, NCCL's on a
// GPU) runs here through collective::HostMemoryCollectives, so every algorithm's two device
// paths are compared on every machine.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/collective/device_collectives.h"
#include "runtime/core/error.h"
#include "runtime/model/device_mlp.h"
#include "tests/unit/train/peers.h"

namespace {

using namespace dpg;
using model::DeviceArray;

// Forwards to the host instance and counts the values that cross between host and device by
// array and direction ("params out", "gradient in", ...): what a GPU's PCIe link would carry.
class CountingDevice final : public model::DeviceMlp {
 public:
  CountingDevice(std::unique_ptr<model::DeviceMlp> inner, std::map<std::string, long long>& n)
      : inner_(std::move(inner)), n_(n) {}
  const model::MlpSpec& spec() const override { return inner_->spec(); }
  std::size_t num_params() const override { return inner_->num_params(); }
  std::string device_name() const override { return inner_->device_name(); }
  void upload_params(std::span<const float> p) override {
    n_["params in"] += static_cast<long long>(p.size());
    inner_->upload_params(p);
  }
  void download_params(std::span<float> p) const override {
    n_["params out"] += static_cast<long long>(p.size());
    inner_->download_params(p);
  }
  void upload_rows(std::span<const float> x, std::span<const std::int32_t> y) override {
    inner_->upload_rows(x, y);
  }
  std::size_t resident_rows() const override { return inner_->resident_rows(); }
  model::DeviceStepStats gradient(std::span<const std::uint32_t> b, long long t,
                                  const model::DeviceDpOptions& dp) override {
    ++n_["steps"];
    return inner_->gradient(b, t, dp);
  }
  void download_gradient(std::span<float> out) const override {
    n_["gradient out"] += static_cast<long long>(out.size());
    inner_->download_gradient(out);
  }
  void upload_gradient(std::span<const float> g) override {
    n_["gradient in"] += static_cast<long long>(g.size());
    inner_->upload_gradient(g);
  }
  void sgd_step(const model::DeviceSgdOptions& o) override { inner_->sgd_step(o); }
  void download_momentum(std::span<float> out) const override {
    n_["momentum out"] += static_cast<long long>(out.size());
    inner_->download_momentum(out);
  }
  void restore_momentum(std::span<const float> v, bool started) override {
    n_["momentum in"] += static_cast<long long>(v.size());
    inner_->restore_momentum(v, started);
  }
  void average_step(float decay) override { inner_->average_step(decay); }
  bool momentum_started() const override { return inner_->momentum_started(); }
  float* device_data(DeviceArray which) override { return inner_->device_data(which); }
  void stream_out(DeviceArray which, std::span<const std::pair<std::size_t, std::size_t>> ranges,
                  const ReadyRange& ready) override {
    for (const auto& r : ranges) n_[name(which) + " out"] += static_cast<long long>(r.second);
    inner_->stream_out(which, ranges, ready);
  }
  void stream_in(DeviceArray which, std::size_t offset, std::span<const float> v) override {
    n_[name(which) + " in"] += static_cast<long long>(v.size());
    inner_->stream_in(which, offset, v);
  }
  std::vector<float*> neighbour_buffers(std::size_t count) override {
    return inner_->neighbour_buffers(count);
  }
  void mix_params(float self, std::span<const float> w) override { inner_->mix_params(self, w); }
  model::Mlp::Evaluation evaluate(std::span<const float> x,
                                  std::span<const std::int32_t> y) override {
    return inner_->evaluate(x, y);
  }

 private:
  static std::string name(DeviceArray a) {
    return a == DeviceArray::params ? "params" : a == DeviceArray::gradient ? "gradient" : "average";
  }
  std::unique_ptr<model::DeviceMlp> inner_;
  std::map<std::string, long long>& n_;
};

struct Options {
  bool direct = false;                                     // transport nccl, on host memory
  std::vector<train::GossipPhase> phases = {};
  std::function<void(int, long long, std::atomic<bool>&)> hook = {};  // before each step
};

// Every peer on the host instance (counted in traffic[rank]).
std::vector<test::PeerResult> run(const TrainConfig& c, int world, const Options& o,
                                  std::vector<std::map<std::string, long long>>* traffic = nullptr) {
  std::vector<std::map<std::string, long long>> local(static_cast<std::size_t>(world));
  auto& counts = traffic != nullptr ? *traffic : local;
  counts.assign(static_cast<std::size_t>(world), {});
  std::vector<std::atomic<bool>> flags(static_cast<std::size_t>(world));
  return test::run_peers(
      world, c, 400, o.phases, std::chrono::seconds(20), {},
      [&](int r, train::RunInputs& t) {
        auto& n = counts[static_cast<std::size_t>(r)];
        t.backends.device = [&n](const model::MlpSpec& spec, std::span<const float> params, int) {
          return std::make_unique<CountingDevice>(model::make_host_thrust_mlp(spec, params), n);
        };
        if (o.direct) {
          t.backends.direct = [](collective::Communicator& comm) {
            return std::make_unique<collective::HostMemoryCollectives>(comm);
          };
        }
        auto& flag = flags[static_cast<std::size_t>(r)];
        t.hooks.stop = &flag;
        if (o.hook) {
          t.hooks.step = [&o, &flag, r](long long s, std::span<const float>) { o.hook(r, s, flag); };
        }
      },
      [&](int) {
        TrainConfig mine = c;
        mine.device = "cuda";
        if (o.direct) mine.transport = TransportMode::nccl;
        return mine;
      });
}

void require_ok(const std::vector<test::PeerResult>& res) {
  for (const auto& r : res) {
    CAPTURE(r.error);
    REQUIRE(r.error == "");
  }
}

}  // namespace

TEST_CASE("device-resident: the direct collectives give the staged path's models bit for bit") {
  // The same noise (Philox keyed by seed, rank and step) and the same sums in the same order:
  // summing the gradient, averaging the models or mixing the neighbours' on the device must give
  // exactly what the staged copies and the host's collectives give.
  // The one-peer exponential graph changes every round, and each peer's one out-neighbour is not
  // its in-neighbour: the exchange's sends and receives must follow round t's graph.
  struct Case {
    Algo algo;
    int world;
    const char* graph;
  };
  for (const Case k : {Case{Algo::allreduce, 3, nullptr}, Case{Algo::local_sgd, 3, nullptr},
                       Case{Algo::gossip, 4, "ring"},
                       Case{Algo::gossip, 4, "one-peer-exponential"}}) {
    CAPTURE(to_string(k.algo));
    const std::string graph = k.graph != nullptr ? k.graph : "";
    CAPTURE(graph);
    TrainConfig c = test::small_config(k.algo);
    c.epochs = 1;
    c.momentum = 0.5;
    if (k.algo == Algo::local_sgd) c.local_steps = 3;  // refused with the others
    Options o;
    if (k.graph != nullptr) o.phases = test::graph_phases(k.graph, k.world);
    const auto staged = run(c, k.world, o);
    o.direct = true;
    const auto direct = run(c, k.world, o);
    require_ok(staged);
    require_ok(direct);
    for (int r = 0; r < k.world; ++r) {
      CAPTURE(r);
      CHECK(direct[r].params == staged[r].params);
      CHECK(direct[r].summary.test_accuracy == staged[r].summary.test_accuracy);
      CHECK(direct[r].summary.epsilon == staged[r].summary.epsilon);
    }
    CHECK(staged[0].summary.test_accuracy > 0.8);
  }
}

TEST_CASE("device-resident: non-private gossip and local SGD on the device reach the CPU's model") {
  for (const Algo algo : {Algo::gossip, Algo::local_sgd}) {
    CAPTURE(to_string(algo));
    TrainConfig c = test::small_config(algo);
    c.dp = false;
    c.epochs = 2;
    c.lr = 0.3;
    c.momentum = 0.5;
    if (algo == Algo::local_sgd) c.local_steps = 2;
    c.ema_decay = 0.9;  // the reported model is the average, kept on the device
    Options o;
    if (algo == Algo::gossip) o.phases = test::graph_phases("ring", 3);
    const auto dev = run(c, 3, o);
    const auto cpu = test::run_peers(3, c, 400, o.phases);
    require_ok(dev);
    require_ok(cpu);
    for (int r = 0; r < 3; ++r) {
      // Only the order of the sums in the forward and backward passes differs.
      CHECK(test::max_abs_diff(dev[r].params, cpu[r].params) < 1e-4 * test::max_abs(cpu[r].params));
    }
    CHECK(dev[0].summary.test_accuracy == doctest::Approx(cpu[0].summary.test_accuracy).epsilon(0.01));
    REQUIRE(dev[0].epochs.size() == 2);
    for (std::size_t e = 0; e < 2; ++e) {
      CHECK(dev[0].epochs[e].test_loss ==
            doctest::Approx(cpu[0].epochs[e].test_loss).epsilon(1e-3));
    }
  }
}

TEST_CASE("device-resident: only what goes on the wire leaves the device") {
  TrainConfig c = test::small_config(Algo::allreduce);
  c.epochs = 2;
  c.ema_decay = 0.9;  // averaged on the device too
  std::vector<std::map<std::string, long long>> staged, direct, gossip;
  const auto first = run(c, 2, {}, &staged);
  require_ok(first);
  Options o;
  o.direct = true;
  require_ok(run(c, 2, o, &direct));
  c.algo = Algo::gossip;
  o = {};
  o.phases = test::graph_phases("ring", 2);
  require_ok(run(c, 2, o, &gossip));
  const auto n = static_cast<long long>(first[0].params.size());
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    const long long steps = staged[r]["steps"];
    REQUIRE(steps >= 10);
    // The model and momentum go to the device at the start (after the broadcast), never per
    // step; the model comes back for each of the 2 evaluations (the end finds it current).
    for (auto* t : {&staged[r], &direct[r], &gossip[r]}) {
      const long long wire = t == &gossip[r] ? steps * n : 0;  // gossip's messages
      CHECK((*t)["params in"] == n + wire);
      CHECK((*t)["momentum in"] == n);
      CHECK((*t)["average in"] == n);
      CHECK((*t)["params out"] == 2 * n + wire);
      CHECK((*t)["average out"] == 2 * n);
    }
    // All-reduce over the transport: the gradient out and its sum back, each step.
    CHECK(staged[r]["gradient out"] == steps * n);
    CHECK(staged[r]["gradient in"] == steps * n);
    // NCCL's path: the gradient is summed where it is.
    CHECK(direct[r]["gradient out"] == 0);
    CHECK(direct[r]["gradient in"] == 0);
    // Gossip over the transport: the model out (each round's message) and the mixed model in;
    // its gradient never leaves.
    CHECK(gossip[r]["gradient out"] == 0);
  }
}

TEST_CASE("device-resident: a stopped and resumed run ends with the uninterrupted run's model") {
  // The model, momentum and average come back for the checkpoint and go to the device after the
  // resume.
  TrainConfig c = test::small_config(Algo::gossip);
  c.epochs = 2;
  c.momentum = 0.9;
  c.ema_decay = 0.9;
  Options o;
  o.phases = test::graph_phases("ring", 3);
  const auto whole = run(c, 3, o);
  require_ok(whole);
  const auto dir = std::filesystem::temp_directory_path() /
                   ("dpg_device_resume_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  c.checkpoint_dir = dir.string();
  o.hook = [](int rank, long long t, std::atomic<bool>& stop) {
    if (rank == 1 && t == 5) stop = true;
  };
  const auto stopped = run(c, 3, o);
  require_ok(stopped);
  CHECK(stopped[0].summary.stopped_at > 5);
  c.resume = true;
  o.hook = {};
  const auto resumed = run(c, 3, o);
  std::filesystem::remove_all(dir);
  require_ok(resumed);
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    CHECK(resumed[r].summary.resumed_from == stopped[0].summary.stopped_at);
    CHECK(resumed[r].params == whole[r].params);
    CHECK(resumed[r].summary.epsilon == whole[r].summary.epsilon);
    // The reported model is the moving average: it too went through the checkpoint.
    CHECK(resumed[r].summary.test_accuracy == whole[r].summary.test_accuracy);
    REQUIRE(!resumed[r].epochs.empty());
    CHECK(resumed[r].epochs.back().test_loss == whole[r].epochs.back().test_loss);
  }
}

TEST_CASE("device: the parameter servers and AD-PSGD keep the host model, sent down every step") {
  // Their models arrive from, or are read by, other peers' messages on the host.
  for (const Algo algo : {Algo::ps_sync, Algo::ad_psgd}) {
    CAPTURE(to_string(algo));
    TrainConfig c = test::small_config(algo);
    c.epochs = 1;
    Options o;
    if (algo == Algo::ad_psgd) o.phases = test::graph_phases("ring", 4);
    std::vector<std::map<std::string, long long>> traffic;
    const auto res = run(c, 4, o, &traffic);
    require_ok(res);
    const auto n = static_cast<long long>(res[0].params.size());
    for (int r = 0; r < 4; ++r) {
      CAPTURE(r);
      const long long steps = traffic[r]["steps"];
      REQUIRE(steps > 0);
      CHECK(traffic[r]["params in"] == steps * n);     // the host model before each step
      CHECK(traffic[r]["gradient out"] == steps * n);  // the released gradient after it
      CHECK(traffic[r]["momentum in"] == 0);           // the optimiser stays on the host
    }
    CHECK(res[0].summary.test_accuracy > 0.7);
  }
}

namespace {

// HostMemoryCollectives with a route for the run's float all-reduces, as NCCL's has: what it is
// given goes over the transport in doubles (so that the route never calls itself), counted.
class RoutingCollectives final : public collective::DeviceCollectives {
 public:
  RoutingCollectives(collective::Communicator& comm, std::shared_ptr<std::atomic<int>> routed)
      : inner_(comm), comm_(comm), routed_(std::move(routed)) {}
  void allreduce(float* data, std::size_t count, collective::Reduce op) override {
    inner_.allreduce(data, count, op);
  }
  void start_exchange(std::span<const collective::DeviceSend> sends,
                      std::span<const collective::DeviceRecv> recvs) override {
    inner_.start_exchange(sends, recvs);
  }
  void finish_exchange() override { inner_.finish_exchange(); }
  collective::Communicator::FloatAllreduce host_route() override {
    return [comm = &comm_, routed = routed_](std::span<float> data, collective::Reduce op) {
      ++*routed;
      std::vector<double> wide(data.begin(), data.end());
      comm->allreduce(public_value(std::span<double>(wide)), op);
      std::copy(wide.begin(), wide.end(), data.begin());
    };
  }

 private:
  collective::HostMemoryCollectives inner_;
  collective::Communicator& comm_;
  std::shared_ptr<std::atomic<int>> routed_;
};

}  // namespace

TEST_CASE("device: the route of the float all-reduces into the direct collectives ends with the "
          "run") {
  // NCCL's route calls the NCCL communicator that the run's state owns: a float all-reduce of the
  // same communicator after the run (or in a later run) must go over the transport again.
  constexpr int kWorld = 2;
  net::InprocFabric fabric(kWorld, std::chrono::seconds(20));
  const data::Dataset test = test::blobs(300, 999);
  std::vector<int> during(kWorld, 0), after(kWorld, -1);
  std::vector<std::vector<float>> sums(kWorld);
  std::vector<std::string> errors(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      try {
        collective::Communicator comm(fabric.peer(r));
        auto routed = std::make_shared<std::atomic<int>>(0);
        {
          TrainConfig c = test::small_config(Algo::allreduce);
          c.epochs = 1;
          c.device = "cuda";
          c.transport = TransportMode::nccl;
          c.metrics_every = 2;  // consensus reports: float all-reduces of the models
          data::Prepared d{test::blobs(200, 100 + static_cast<std::uint64_t>(r)), test, {}};
          train::RunInputs t;
          t.config = c;
          t.data = std::move(d);
          t.comm = &comm;
          t.backends.device = [](const model::MlpSpec& spec, std::span<const float> params, int) {
            return model::make_host_thrust_mlp(spec, params);
          };
          t.backends.direct = [routed](collective::Communicator& cm) {
            return std::make_unique<RoutingCollectives>(cm, routed);
          };
          train::Trainer(std::move(t)).run([](const train::EpochReport&) {}, {});
          during[static_cast<std::size_t>(r)] = routed->load();
        }
        std::vector<float> v = {1.0f + static_cast<float>(r), 10.0f};
        comm.allreduce(public_value(std::span<float>(v)));
        sums[static_cast<std::size_t>(r)] = v;
        after[static_cast<std::size_t>(r)] = routed->load() - during[static_cast<std::size_t>(r)];
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) {
    CAPTURE(r);
    REQUIRE(errors[r] == "");
    CHECK(during[r] > 0);  // the run's float all-reduces took the route
    CHECK(after[r] == 0);  // the one after it did not
    CHECK(sums[r] == std::vector<float>{3.0f, 20.0f});
  }
}
