// The checkpoint file and folder (runtime/train/checkpoint.h), and the check that a checkpoint
// belongs to the run resuming it (run_state.h).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/core/error.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/run_state.h"
#include "tests/unit/train/blobs.h"
#include "tests/unit/train/peers.h"

namespace {

using namespace dpg;
namespace fs = std::filesystem;

train::Checkpoint sample() {
  train::Checkpoint c;
  c.meta = {{"step", 12}, {"rank", 1}, {"note", "x"}};
  const std::vector<float> model = {1.5f, -2.25f, 3e-8f, 0.0f};
  const std::vector<double> d = {0.1, 1e300};
  c.put("model", std::span<const float>(model));
  c.put("progress", std::span<const double>(d));
  c.put_bytes("empty", "");
  return c;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

Code code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  FAIL("no error");
  return Code::internal;
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("dpg_ckpt_" + std::to_string(::getpid()) + "_" +
                                               std::to_string(reinterpret_cast<std::uintptr_t>(this)));
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
};

void no_warn(const std::string&) {}

// The plan's inputs for `c` on two peers of 400 rows each.
dp::PlanInputs two_shards(const TrainConfig& c) {
  dp::PlanInputs in;
  in.shard_rows = {400, 400};
  in.batch_size = c.batch_size;
  in.epochs = c.epochs;
  in.noise_multiplier = c.noise_multiplier;
  return in;
}

}  // namespace

TEST_CASE("checkpoint: encode and decode give back the meta and every section, bit for bit") {
  const train::Checkpoint a = sample();
  const train::Checkpoint b = train::Checkpoint::decode(a.encode(), "mem");
  CHECK(b.meta == a.meta);
  std::vector<float> model(4);
  b.get("model", std::span<float>(model));
  CHECK(model == std::vector<float>{1.5f, -2.25f, 3e-8f, 0.0f});
  std::vector<double> d(2);
  b.get("progress", std::span<double>(d));
  CHECK(d == std::vector<double>{0.1, 1e300});
  CHECK(b.count<float>("empty") == 0);
  CHECK(b.encode() == a.encode());
  // A section of another size than the run expects is refused, naming it.
  std::vector<float> wrong(5);
  try {
    b.get("model", std::span<float>(wrong));
    FAIL("accepted a section of the wrong size");
  } catch (const Error& e) {
    CHECK(e.code() == Code::data_loss);
    CHECK(std::string(e.what()).find("\"model\"") != std::string::npos);
  }
  CHECK(code_of([&] { b.get("absent", std::span<float>(wrong)); }) == Code::data_loss);
}

TEST_CASE("checkpoint: every truncation, and every flipped byte, is refused as data_loss") {
  const std::string bytes = sample().encode();
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    CAPTURE(n);
    CHECK(code_of([&] { train::Checkpoint::decode(bytes.substr(0, n), "cut"); }) ==
          Code::data_loss);
  }
  CHECK(code_of([&] { train::Checkpoint::decode(bytes + "x", "long"); }) == Code::data_loss);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    CAPTURE(i);
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    CHECK(code_of([&] { train::Checkpoint::decode(bad, "flip"); }) == Code::data_loss);
  }
  try {
    std::string bad = bytes;
    bad[bytes.size() - 3] ^= 1;
    train::Checkpoint::decode(bad, "f.ckpt");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "f.ckpt: checksum mismatch: the file is corrupt");
  }
}

TEST_CASE("checkpoint folder: keeps the newest K, skips damaged files, removes temporaries") {
  TempDir tmp;
  const train::CheckpointDir dir(tmp.path.string(), 1, 2);
  CHECK(!dir.has_history());
  CHECK(dir.valid_steps(no_warn).empty());
  for (long long step : {4, 8, 12}) {
    train::Checkpoint c = sample();
    c.meta["step"] = step;
    dir.write(step, c);
  }
  CHECK(dir.listed() == std::vector<long long>{8, 12});  // keep = 2
  CHECK(dir.has_history());
  CHECK((fs::status(dir.path_of(12)).permissions() & fs::perms::others_read) == fs::perms::none);
  CHECK(dir.read(12).meta["note"] == "x");
  // Step 12 loses its last byte, a killed write leaves a temporary: 8 is the newest valid.
  const std::string whole = slurp(dir.path_of(12));
  spit(dir.path_of(12), whole.substr(0, whole.size() - 1));
  spit(dir.path_of(16) + ".tmp.999", whole);
  CHECK(dir.valid_steps(no_warn) == std::vector<long long>{8});
  CHECK(!fs::exists(dir.path_of(16) + ".tmp.999"));
  // A file renamed to another step, or another rank's, is refused.
  fs::copy_file(dir.path_of(8), dir.path_of(20));
  CHECK(code_of([&] { dir.read(20); }) == Code::data_loss);
  const train::CheckpointDir other(tmp.path.string(), 0, 2);
  fs::create_directories(other.folder());
  fs::copy_file(dir.path_of(8), other.path_of(8));
  CHECK(other.valid_steps(no_warn).empty());
  dir.remove_after(8);
  CHECK(dir.listed() == std::vector<long long>{8});
  // The ledger.
  CHECK(!dir.reserved());
  dir.reserve(40);
  CHECK(dir.reserved() == 40);
  spit(fs::path(dir.folder()) / "ledger.json", "{\"reserved_until\": ");
  CHECK(code_of([&] { dir.reserved(); }) == Code::invalid_argument);
  // Another rank's ledger would charge this peer for that peer's steps: refused, naming both.
  other.reserve(7);
  fs::copy_file(fs::path(other.folder()) / "ledger.json", fs::path(dir.folder()) / "ledger.json",
                fs::copy_options::overwrite_existing);
  try {
    dir.reserved();
    FAIL("rank 0's ledger was read as rank 1's");
  } catch (const Error& e) {
    CHECK(e.code() == Code::invalid_argument);
    CHECK(std::string(e.what()).find("ledger.json") != std::string::npos);
    CHECK(std::string(e.what()).find("is 0, but rank 1 reads this folder") != std::string::npos);
  }
  CHECK(other.reserved() == 7);
}

TEST_CASE("checkpoint folder: a write that cannot be made is an error naming the file") {
  TempDir tmp;
  fs::create_directories(tmp.path);
  spit(tmp.path / "rank-0", "a file where the folder should be");
  const train::CheckpointDir dir(tmp.path.string(), 0, 3);
  try {
    dir.write(4, sample());
    FAIL("the write succeeded");
  } catch (const Error& e) {
    CHECK(e.code() == Code::failed_precondition);
    CHECK(std::string(e.what()).find("rank-0") != std::string::npos);
  }
}

TEST_CASE("checkpoint: counts over private batches are kept only where the run reports them") {
  const TrainConfig c = test::small_config(Algo::allreduce);
  const dp::PrivacyPlan plan = dp::plan_privacy(two_shards(c));
  const data::Dataset rows = test::blobs(400, 1);
  train::RunState s(c, rows, plan, 1);
  const train::Progress p{.step = 3, .loss_sum = 2.5, .seen = 90, .correct = 41, .dropped = 2,
                          .epoch_dropped_before = 1, .skipped = 1, .epoch_skipped_before = 1,
                          .samples = 96};
  const auto round_trip = [&](const TrainConfig& saved, const TrainConfig& resumed) {
    const train::Checkpoint ck = train::Checkpoint::decode(
        train::save_run_state(s, p, {saved, plan, 1, 2, 400}).encode(), "r1.ckpt");
    train::RunState again(resumed, rows, plan, 1);
    return train::restore_run_state(again, ck, {resumed, plan, 1, 2, 400});
  };
  // By default neither is reported: the file holds zeros, and a resume reads zeros. Each flag
  // keeps its own counts, and only those.
  struct Case {
    bool train, dropped;
  };
  for (const Case k : {Case{false, false}, Case{true, false}, Case{false, true}}) {
    CAPTURE(k.train);
    CAPTURE(k.dropped);
    TrainConfig run = c;
    run.report_train_metrics = k.train;
    run.report_dropped = k.dropped;
    const train::Progress back = round_trip(run, run);
    CHECK(back.step == 3);
    CHECK(back.samples == 96);
    CHECK(back.seen == (k.train ? 90 : 0));
    CHECK(back.correct == (k.train ? 41 : 0));
    CHECK(back.loss_sum == (k.train ? 2.5 : 0.0));
    CHECK(back.dropped == (k.dropped ? 2 : 0));
    CHECK(back.epoch_dropped_before == (k.dropped ? 1 : 0));
    CHECK(back.skipped == (k.dropped ? 1 : 0));
    CHECK(back.epoch_skipped_before == (k.dropped ? 1 : 0));
  }
}

TEST_CASE("checkpoint: another run's checkpoint is refused, naming what differs") {
  TrainConfig c = test::small_config(Algo::allreduce);
  const data::Dataset d = test::blobs(400, 1);
  dp::PlanInputs in = two_shards(c);
  const dp::PrivacyPlan plan = dp::plan_privacy(in);
  train::RunState s(c, d, plan, 1);
  const train::RunIdentity id{c, plan, 1, 2, 400};
  train::Checkpoint ck = train::Checkpoint::decode(
      train::save_run_state(s, train::Progress{.step = 3}, id).encode(), "r1.ckpt");
  train::check_same_run(ck, id);  // its own run
  // Changing what the run computes is refused, naming the field; how it is driven is not.
  auto refusal = [&](const TrainConfig& other, const dp::PrivacyPlan& p, int world,
                     std::size_t rows) -> std::string {
    try {
      train::check_same_run(ck, {other, p, 1, world, rows});
    } catch (const Error& e) {
      CHECK(e.code() == Code::invalid_argument);
      return e.what();
    }
    return "";
  };
  TrainConfig lr = c;
  lr.lr = 0.5;
  CHECK(refusal(lr, plan, 2, 400).find("/lr was 1.0, is 0.5") != std::string::npos);
  CHECK(refusal(lr, plan, 2, 400).find("r1.ckpt") == 0);
  TrainConfig control = c;
  control.timeout_s = 5;
  control.checkpoint_every = 7;
  control.resume = true;
  control.threads = 2;
  CHECK(refusal(control, plan, 2, 400) == "");
  TrainConfig seed = c;
  seed.noise_seed = 8;
  CHECK(refusal(seed, plan, 2, 400).find("/noise_seed") != std::string::npos);
  seed.noise_seed = 0;
  CHECK(refusal(seed, plan, 2, 400).find("/noise_seed") != std::string::npos);
  CHECK(refusal(c, plan, 3, 400).find("of 2 peers") != std::string::npos);
  CHECK(refusal(c, plan, 2, 399).find("shard of 400 rows") != std::string::npos);
  in.shard_rows = {400, 500};
  CHECK(refusal(c, dp::plan_privacy(in), 2, 400).find("privacy plan") != std::string::npos);
}
