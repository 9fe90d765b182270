// Checkpoints, stops and resumes through the whole Trainer on in-process peers: a run stopped (by
// the stop flag a signal sets, on one peer) or killed, then resumed, ends with the model and the
// epsilon of the run that was never interrupted (docs/RELIABILITY.md).
//
// Equality is bitwise: the resumed run restores every float it holds (model, momentum, average,
// a server's shard and optimiser) and the generators of the sampler and of the noise (the noise
// seed is fixed), and the synchronous algorithms add floats in an order fixed by the ranks, so
// every later step computes exactly what the uninterrupted run computed.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>

#include "runtime/core/error.h"
#include "runtime/train/checkpoint.h"
#include "tests/unit/train/peers.h"

namespace {

using namespace dpg;
namespace fs = std::filesystem;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("dpg_resume_" + std::to_string(::getpid()) + "_" +
                                               std::to_string(reinterpret_cast<std::uintptr_t>(this)));
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<train::GossipPhase> ring(int world) { return test::graph_phases("ring", world); }

// test::run_peers with a stop flag for each peer (as separate processes have):
// `hook(rank, step, flag)` runs before each step and may set it, or throw.
using Hook = std::function<void(int rank, long long step, std::atomic<bool>& stop)>;
std::vector<test::PeerResult> run(int world, const TrainConfig& c,
                                  const std::vector<train::GossipPhase>& phases = {},
                                  const Hook& hook = {},
                                  std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  std::vector<std::atomic<bool>> flags(static_cast<std::size_t>(world));
  return test::run_peers(world, c, 400, phases, timeout, {}, [&](int r, train::RunInputs& t) {
    auto& flag = flags[static_cast<std::size_t>(r)];
    t.hooks.stop = &flag;
    if (hook) {
      t.hooks.step = [&hook, &flag, r](long long s, std::span<const float>) { hook(r, s, flag); };
    }
  });
}

// For runs where a peer fails: the others learn of it by this timeout (in process there is no
// abort to tell them), so it is short, but not so short that a peer computing its epoch end on a
// loaded machine (a sanitizer, a test beside it) is taken for the failed one first.
constexpr std::chrono::milliseconds kFailTimeout{4000};

void require_ok(const std::vector<test::PeerResult>& peers) {
  for (const auto& p : peers) REQUIRE(p.error == "");
}

// Stops every peer at the first stop check after rank 2 is signalled before step 7 (step 10 by
// default, step 8 when every step is checked), then resumes: each peer's model, the epsilons and
// the last epoch line equal the uninterrupted run's.
void check_stop_and_resume(TrainConfig c, const std::vector<train::GossipPhase>& phases,
                           int world) {
  const auto whole = run(world, c, phases);
  require_ok(whole);
  TempDir dir;
  c.checkpoint_dir = dir.path.string();
  const auto stopped = run(world, c, phases, [](int rank, long long t, std::atomic<bool>& stop) {
    if (rank == 2 && t == 7) stop = true;
  });
  require_ok(stopped);
  const long long at = c.stop_check_every == 1 ? 8 : 10;
  for (int r = 0; r < world; ++r) {
    const auto& s = stopped[static_cast<std::size_t>(r)].summary;
    CHECK(s.stopped_at == at);
    CHECK(train::CheckpointDir(dir.path.string(), r, 3).listed() == std::vector<long long>{at});
  }
  c.resume = true;
  const auto resumed = run(world, c, phases);
  require_ok(resumed);
  for (int r = 0; r < world; ++r) {
    CAPTURE(r);
    const auto& a = whole[static_cast<std::size_t>(r)];
    const auto& b = resumed[static_cast<std::size_t>(r)];
    CHECK(b.summary.resumed_from == at);
    CHECK(b.summary.replay_charged_steps == 0);
    CHECK(b.params == a.params);
    CHECK(b.summary.epsilon == a.summary.epsilon);
    CHECK(b.summary.message_epsilon == a.summary.message_epsilon);
    CHECK(b.summary.accountant == a.summary.accountant);
    CHECK(b.summary.test_accuracy == a.summary.test_accuracy);
    CHECK(b.summary.extra == a.summary.extra);
    REQUIRE(!b.epochs.empty());
    CHECK(b.epochs.back().loss == a.epochs.back().loss);
    CHECK(b.epochs.back().epsilon == a.epochs.back().epsilon);
  }
}

// Two peers of `c` (checkpoints every 5 steps) where rank 0 fails before step 12, after the
// step-10 checkpoint: rank 0's error.
std::string crash_rank_0_at_12(const TrainConfig& c) {
  return run(
             2, c, {},
             [](int rank, long long t, std::atomic<bool>&) {
               if (rank == 0 && t == 12) fail(Code::internal, "injected");
             },
             kFailTimeout)[0]
      .error;
}

}  // namespace

TEST_CASE("resume: all-reduce, stopped on one peer's signal, ends bit for bit as if never stopped") {
  TrainConfig c = test::small_config(Algo::allreduce);
  c.ema_decay = 0.9;  // the average is part of the state too
  check_stop_and_resume(c, {}, 4);
}

TEST_CASE("resume: all-reduce with buckets, shuffled batches") {
  TrainConfig c = test::small_config(Algo::allreduce);
  c.bucket_bytes = 64;
  c.sampling = Sampling::shuffle;
  check_stop_and_resume(c, {}, 4);
}

TEST_CASE("resume: gossip on a ring, checking for a stop every step, ends bit for bit") {
  TrainConfig c = test::small_config(Algo::gossip);
  c.stop_check_every = 1;
  check_stop_and_resume(c, ring(4), 4);
}

TEST_CASE("resume: ps-sync (a server's optimiser) and local-sgd end bit for bit") {
  TrainConfig ps = test::small_config(Algo::ps_sync);
  ps.servers = 2;
  check_stop_and_resume(ps, {}, 4);
  TrainConfig local = test::small_config(Algo::local_sgd);
  local.local_steps = 3;
  check_stop_and_resume(local, {}, 4);
}

TEST_CASE("resume: the asynchronous algorithms stop together, resume and finish the plan") {
  TrainConfig ps = test::small_config(Algo::ps_async);
  ps.servers = 2;
  ps.stop_check_every = 4;
  TrainConfig ad = test::small_config(Algo::ad_psgd);
  ad.stop_check_every = 4;
  TrainConfig partial = test::small_config(Algo::partial_allreduce);
  partial.stop_check_every = 4;
  for (const auto& [c, phases] : {std::pair{ps, std::vector<train::GossipPhase>{}},
                                  std::pair{ad, ring(4)},
                                  std::pair{partial, std::vector<train::GossipPhase>{}}}) {
    CAPTURE(to_string(c.algo));
    TempDir dir;
    TrainConfig first = c;
    first.checkpoint_dir = dir.path.string();
    const auto stopped = run(4, first, phases, [](int rank, long long t, std::atomic<bool>& stop) {
      if (rank == 1 && t == 5) stop = true;
    });
    require_ok(stopped);
    for (const auto& p : stopped) CHECK(p.summary.stopped_at == 8);  // the next check
    first.resume = true;
    const auto resumed = run(4, first, phases);
    require_ok(resumed);
    const auto whole = run(4, c, phases);
    require_ok(whole);
    for (const auto& p : resumed) {
      CHECK(p.summary.resumed_from == 8);
      CHECK(p.summary.epsilon == whole[0].summary.epsilon);
      CHECK(p.summary.test_accuracy > 0.8);
    }
    if (c.algo == Algo::ad_psgd) {
      // The pairings count on from the checkpoint's.
      CHECK(resumed[0].summary.extra["pairings"].get<long long>() >
            stopped[0].summary.extra["pairings"].get<long long>());
    }
    if (c.algo == Algo::partial_allreduce) {
      // Every step joined a group, those before the checkpoint counted on.
      for (const auto& p : resumed) {
        CHECK(p.summary.extra["groups"].get<long long>() == p.summary.steps);
      }
    }
  }
}

TEST_CASE("resume: after a crash, from the newest step every peer holds intact") {
  TrainConfig c = test::small_config(Algo::allreduce);
  const auto whole = run(4, c);
  require_ok(whole);
  TempDir dir;
  c.checkpoint_dir = dir.path.string();
  c.checkpoint_every = 5;
  const auto crashed = run(
      4, c, {},
      [](int rank, long long t, std::atomic<bool>&) {
        if (rank == 1 && t == 17) fail(Code::internal, "rank 1: injected failure at step 17");
      },
      kFailTimeout);
  CHECK(crashed[1].error.find("injected") != std::string::npos);
  CHECK(crashed[0].error != "");
  // Rank 3's newest is damaged (a flipped byte): every peer goes back to step 10.
  const train::CheckpointDir r3(dir.path.string(), 3, 3);
  REQUIRE(r3.listed() == std::vector<long long>{5, 10, 15});
  {
    std::fstream f(r3.path_of(15), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  c.resume = true;
  const auto resumed = run(4, c);
  require_ok(resumed);
  for (int r = 0; r < 4; ++r) {
    const auto& b = resumed[static_cast<std::size_t>(r)];
    CHECK(b.summary.resumed_from == 10);
    // The fixed seed repeats steps 10..19 exactly, so they are not charged again.
    CHECK(b.summary.replay_charged_steps == 0);
    CHECK(b.params == whole[static_cast<std::size_t>(r)].params);
    CHECK(b.summary.epsilon == whole[0].summary.epsilon);
    // The abandoned continuation's step 15 is gone from every peer; the run wrote its own.
    CHECK(train::CheckpointDir(dir.path.string(), r, 3).listed() ==
          std::vector<long long>{15, 20, 25});
  }
}

TEST_CASE("resume: with a secret noise seed, the steps past the checkpoint are charged again") {
  TrainConfig c = test::small_config(Algo::allreduce);
  c.noise_seed = 0;
  TempDir dir;
  c.checkpoint_dir = dir.path.string();
  c.checkpoint_every = 5;
  CHECK(crash_rank_0_at_12(c) == "injected");
  c.resume = true;
  const auto resumed = run(2, c);
  require_ok(resumed);
  c.checkpoint_dir = "";
  c.checkpoint_every = 0;
  c.resume = false;
  const auto whole = run(2, c);
  require_ok(whole);
  for (const auto& p : resumed) {
    CHECK(p.summary.resumed_from == 10);
    // The ledger reserved steps up to 15 before the crash; new noise for 10..14 is a new release.
    CHECK(p.summary.replay_charged_steps == 5);
    const auto acc = dp::Accountant::from_json(p.summary.accountant);
    CHECK(acc.steps() == p.summary.steps + 5);
    CHECK(p.summary.epsilon > whole[0].summary.epsilon);
  }
  // The charge was written into the step-10 checkpoint before the run went on, so a second
  // failure cannot lose it.
  for (int r = 0; r < 2; ++r) {
    const train::CheckpointDir d(dir.path.string(), r, 3);
    REQUIRE(d.listed() == std::vector<long long>{5, 10});
    CHECK(dp::Accountant::from_json(d.read(10).meta["accountant"]).steps() == 10 + 5);
  }
}

TEST_CASE("resume: none anywhere starts afresh; an earlier run's folder needs --resume") {
  TrainConfig c = test::small_config(Algo::allreduce);
  TempDir dir;
  c.checkpoint_dir = dir.path.string();
  c.epochs = 1;
  c.resume = true;
  const auto fresh = run(2, c);
  require_ok(fresh);
  CHECK(fresh[0].summary.resumed_from == 0);
  c.resume = false;
  const auto refused = run(2, c, {}, {}, kFailTimeout);
  for (const auto& p : refused) {
    CAPTURE(p.error);
    CHECK(p.error.find("--resume") != std::string::npos);
  }
}

TEST_CASE("resume: peers with no step in common refuse, naming each peer's newest") {
  TrainConfig c = test::small_config(Algo::allreduce);
  TempDir dir;
  c.checkpoint_dir = dir.path.string();
  c.checkpoint_every = 5;
  c.checkpoint_keep = 1;
  REQUIRE(crash_rank_0_at_12(c) == "injected");
  fs::remove(train::CheckpointDir(dir.path.string(), 1, 1).path_of(10));
  c.resume = true;
  const auto refused = run(2, c);
  for (const auto& p : refused) {
    CAPTURE(p.error);
    CHECK(p.error.find("rank 0: step 10, rank 1: none") != std::string::npos);
  }
}

TEST_CASE("resume: a finished run trains nothing; finished on some peers only, it resumes") {
  TrainConfig c = test::small_config(Algo::allreduce);
  TempDir dir;
  c.checkpoint_dir = dir.path.string();
  c.checkpoint_every = 5;
  const auto whole = run(2, c);
  require_ok(whole);
  c.resume = true;
  for (int again = 0; again < 2; ++again) {  // job scripts pass --resume every time
    const auto done = run(2, c);
    require_ok(done);
    for (const auto& p : done) {
      CHECK(p.summary.already_finished);
      CHECK(p.summary.epsilon == whole[0].summary.epsilon);
      CHECK(p.epochs.empty());  // nothing evaluated, nothing trained
    }
  }
  // Rank 1's ledger no longer says it finished (it died after its last step): every peer goes
  // back to the newest checkpoint they share, and with the fixed seed repeats the rest exactly.
  train::CheckpointDir one(dir.path.string(), 1, 3);
  REQUIRE(one.finished());
  one.set_run_id(one.ledger_run_id().value());  // the same run's ledger, rewritten
  one.reserve(whole[0].summary.steps);
  const auto resumed = run(2, c);
  require_ok(resumed);
  for (std::size_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK(!resumed[r].summary.already_finished);
    CHECK(resumed[r].summary.resumed_from > 0);
    CHECK(resumed[r].summary.replay_charged_steps == 0);
    CHECK(resumed[r].params == whole[r].params);
    CHECK(resumed[r].summary.epsilon == whole[r].summary.epsilon);
  }
  // A finished run's folder under another setting is refused, naming the ledger and the field.
  c.lr = 0.5;
  const auto refused = run(2, c, {}, {}, kFailTimeout);
  for (const auto& p : refused) {
    CAPTURE(p.error);
    CHECK(p.error.find("ledger.json: /finished") != std::string::npos);
    CHECK(p.error.find("/lr was") != std::string::npos);
  }
}

TEST_CASE("resume: an impossible ledger is damaged: the worst case is charged, not refused") {
  // Below the newest checkpoint (edited down: the lost steps would go uncharged) and past the
  // plan (an absurd count, once reported as the accountant's limit).
  for (const long long edited : {3LL, 1'000'000'000'000LL}) {
    CAPTURE(edited);
    TrainConfig c = test::small_config(Algo::allreduce);
    c.noise_seed = 0;  // a secret seed: replayed steps are new releases
    TempDir dir;
    c.checkpoint_dir = dir.path.string();
    c.checkpoint_every = 5;
    REQUIRE(crash_rank_0_at_12(c) == "injected");
    for (int r = 0; r < 2; ++r) {
      train::CheckpointDir d(dir.path.string(), r, 3);
      d.set_run_id(d.ledger_run_id().value());  // edited in place: the run id stays
      d.reserve(edited);
    }
    c.resume = true;
    const auto resumed = run(2, c);
    require_ok(resumed);
    for (const auto& p : resumed) {
      CHECK(p.summary.resumed_from == 10);
      // Every step past the checkpoint, to the plan's last, is charged again.
      CHECK(p.summary.replay_charged_steps == p.summary.steps - 10);
    }
  }
}

TEST_CASE("resume: peers that restore different models, where allreduce keeps one, refuse") {
  TrainConfig c = test::small_config(Algo::allreduce);
  TempDir dir;
  c.checkpoint_dir = dir.path.string();
  const auto stopped = run(2, c, {}, [](int rank, long long t, std::atomic<bool>& stop) {
    if (rank == 0 && t == 7) stop = true;
  });
  require_ok(stopped);
  const long long at = stopped[0].summary.stopped_at;
  REQUIRE(at > 0);
  // Rank 1's checkpoint of that step, its model changed (as if another run's, the run id kept).
  const train::CheckpointDir one(dir.path.string(), 1, 3);
  train::Checkpoint ck = one.read(at);
  std::vector<float> w(ck.count<float>("model"));
  ck.get("model", std::span<float>(w));
  w[0] += 0.5f;
  ck.put("model", std::span<const float>(w));
  one.write(at, ck);
  c.resume = true;
  const auto refused = run(2, c, {}, {}, kFailTimeout);
  for (const auto& p : refused) {
    CAPTURE(p.error);
    CHECK(p.error.find("restored another model than rank 0") != std::string::npos);
  }
}

TEST_CASE("resume: a peer whose lines nobody reads still makes the epsilons its ledger records") {
  TrainConfig c = test::small_config(Algo::gossip);
  TempDir dir;
  c.checkpoint_dir = dir.path.string();
  const auto peers = test::run_peers(3, c, 400, ring(3), std::chrono::seconds(20), {},
                                     [](int r, train::RunInputs& in) { in.reports_read = r == 0; });
  require_ok(peers);
  const double lead = peers[0].summary.epsilon;
  REQUIRE(std::isfinite(lead));
  for (int r = 1; r < 3; ++r) {
    CAPTURE(r);
    CHECK(peers[static_cast<std::size_t>(r)].summary.epsilon == lead);
  }
}
