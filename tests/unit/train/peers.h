// Runs a Trainer on every peer of an in-process world (one thread per peer), for the algorithms'
// unit tests: each peer trains on its own slice of a synthetic data set and reports its summary
// and its final model.
#pragma once

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/collective/communicator.h"
#include "runtime/core/error.h"
#include "runtime/core/train_config.h"
#include "runtime/data/dataset.h"
#include "runtime/net/inproc/inproc_transport.h"
#include "runtime/train/trainer.h"
#include "tests/unit/train/blobs.h"
#include "topology/generators.h"

namespace dpg::test {

// A small run for the algorithms' tests: the blobs, a 16-wide hidden layer, 3 epochs, a given
// noise multiplier and a fixed noise seed (so two runs can be compared), no metrics.
inline TrainConfig small_config(Algo algo) {
  TrainConfig c;
  c.algo = algo;
  c.hidden = {16};
  c.epochs = 3;
  c.batch_size = 160;
  c.lr = 1.0;
  c.noise_multiplier = 0.8;
  c.threads = 1;
  c.noise_seed = 7;
  c.ema_decay = 0;
  c.metrics = "";
  c.metrics_every = 0;
  return c;
}

// One phase of the named graph kind ("ring", ...) over `world` peers, for graph algorithms.
inline std::vector<train::GossipPhase> graph_phases(const std::string& kind, int world) {
  topology::GraphSpec spec;
  spec.kind = kind;
  spec.peers = world;
  return {topology::Schedule::phase(0, kind, topology::make(spec))};
}

// The largest |a_i - b_i|, and the largest |a_i|: a device run's model against the CPU's.
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
  return d;
}
inline double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float v : a) m = std::max(m, std::fabs(double(v)));
  return m;
}

// A step hook that sleeps before each step for a random 0..max_us microseconds, drawn from one
// generator seeded by `seed` and shared by every peer.
inline std::function<void(int, long long)> random_delays(unsigned seed, int max_us) {
  struct State {
    std::mutex mu;
    std::mt19937 rng;
  };
  auto s = std::make_shared<State>();
  s->rng.seed(seed);
  return [s, max_us](int, long long) {
    int us;
    {
      std::lock_guard lock(s->mu);
      us = std::uniform_int_distribution<int>(0, max_us)(s->rng);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  };
}

struct PeerResult {
  train::TrainSummary summary;
  std::vector<float> params;
  std::vector<train::EpochReport> epochs;
  std::vector<train::ConsensusReport> consensus;  // the K-step reports this peer was handed
  std::string error;  // the peer's exception, "" when it finished
  double noise_multiplier = 0;  // the plan's, once the trainer was built
  // When run() threw: what a wait on its transport then throws (a receive nobody sends). The
  // trainer poisons the transport as it fails, so this is its failure, not a timeout.
  std::string transport_after;
};

// Every peer gets `rows_per_peer` rows of its own (seeded by rank) and the same test split.
// `phases` are the graphs for graph-based algorithms. `timeout` bounds every wait. `step_hook`,
// when set, runs on each peer's thread before each of its steps, with its rank and the step (to
// slow a peer down, or make it throw mid-run). `setup`, when set, gets each peer's trainer
// before it runs (a stop flag, a hook of its own). `config_for`, when set, gives each rank's
// config instead of `c` (per-peer fields such as the device).
inline std::vector<PeerResult> run_peers(
    int world, const TrainConfig& c, std::size_t rows_per_peer,
    const std::vector<train::GossipPhase>& phases = {},
    std::chrono::milliseconds timeout = std::chrono::seconds(20),
    const std::function<void(int rank, long long step)>& step_hook = {},
    const std::function<void(int rank, train::RunInputs& in)>& setup = {},
    const std::function<TrainConfig(int rank)>& config_for = {}) {
  net::InprocFabric fabric(world, timeout);
  std::vector<PeerResult> out(static_cast<std::size_t>(world));
  const data::Dataset test = blobs(300, 999);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      PeerResult& res = out[static_cast<std::size_t>(r)];
      try {
        collective::Communicator comm(fabric.peer(r));
        data::Prepared d{blobs(rows_per_peer, 100 + static_cast<std::uint64_t>(r)), test, {}};
        train::RunInputs in;
        in.config = config_for ? config_for(r) : c;
        in.data = std::move(d);
        in.comm = &comm;
        in.phases = phases;
        if (step_hook) {
          in.hooks.step = [&step_hook, r](long long s, std::span<const float>) { step_hook(r, s); };
        }
        if (setup) setup(r, in);
        train::Trainer t(std::move(in));
        res.noise_multiplier = t.noise_multiplier();
        try {
          res.summary = t.run([&](const train::EpochReport& e) { res.epochs.push_back(e); },
                              [&](const train::ConsensusReport& r) { res.consensus.push_back(r); });
        } catch (const std::exception&) {
          net::Transport& own = fabric.peer(r);
          try {
            own.wait(own.recv((r + 1) % world, {0xFFFFFFFFu, 0, 0}, {}));
          } catch (const std::exception& e) {
            res.transport_after = e.what();
          }
          throw;
        }
        res.params.assign(t.params().begin(), t.params().end());
      } catch (const std::exception& e) {
        res.error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// 4 peers of `c` for 2 epochs of 40 steps, each step 2 ms long, every wait bounded by 1 s, where
// peer `dead` throws before its step 2 (the first evaluation, a collective, comes late): their
// results, and the seconds the whole run took.
struct FailedRun {
  std::vector<PeerResult> peers;
  double seconds = 0;
};
inline FailedRun run_with_one_failing(TrainConfig c, int dead,
                                      const std::vector<train::GossipPhase>& phases = {}) {
  c.epochs = 2;
  c.batch_size = 40;  // 4 peers of 400 rows
  const auto hook = [dead](int rank, long long t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (rank == dead && t == 2) throw Error(Code::aborted, "the test stops this peer");
  };
  const auto begin = std::chrono::steady_clock::now();
  FailedRun out;
  out.peers = run_peers(4, c, 400, phases, std::chrono::seconds(1), hook);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return out;
}

}  // namespace dpg::test
