// The Trainer's checkpoints, resume and stop checks (docs/RELIABILITY.md).
//
// Boundaries. Before step t, at every multiple of stop_check_every and of checkpoint_every, and
// at each epoch's first step, every peer (a) sums everyone's stop flag in a one-value all-reduce,
// so that all peers stop at the same step however many of them were signalled, and (b) when
// stopping or at a checkpoint step, writes its
// checkpoint and meets the others at a barrier, so that no peer's step t can touch the state
// another peer is saving (an asynchronous algorithm's server or responder would).
//
// The privacy ledger. The accountants in a checkpoint count the steps before it; a peer killed
// later has taken steps the checkpoint does not count, and if the resumed run repeats them with
// other noise or in another order, those are new releases of the same data. So each peer keeps
// in ledger.json the highest step it may reach before its next checkpoint (written before the
// steps are taken). At a resume the peers take the highest ledger among them, R, and the common
// step s: unless every peer repeats steps s..R exactly (a fixed noise seed, so the same batches
// and noise; a synchronous algorithm; the same thread counts, so the same float arithmetic),
// the accountants are charged R - s more steps, and the checkpoint of step s is rewritten with
// the charge before anything else happens, so a second failure cannot lose it.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "runtime/core/error.h"
#include "runtime/core/hash.h"
#include "runtime/core/log.h"
#include "runtime/core/os_random.h"
#include "runtime/train/run_state.h"
#include "runtime/train/trainer.h"

namespace dpg::train {
namespace {

// The default spacing of the stop checks. Each is a one-value all-reduce: on a model small
// enough that a step is a few milliseconds, a check every step cost as much as the step's own
// all-reduce (docs/RELIABILITY.md); every 10 steps it is a tenth of that, and a signal still
// stops the run within 10 steps. The asynchronous algorithms check only at each epoch's start
// (just after the evaluation's collectives) and at checkpoints: any periodic check would be a
// meeting of every peer that keeps the fast ones within a period of the slowest.
constexpr long long kStopCheckEvery = 10;

void warn(const std::string& what) { DPG_WARN("train: checkpoint " << what); }

// Every peer's `mine`, in rank order.
std::vector<long long> gather(collective::Communicator* comm, long long mine) {
  if (comm == nullptr) return {mine};
  std::vector<long long> all(static_cast<std::size_t>(comm->world()));
  comm->allgather(public_value(std::as_bytes(std::span(&mine, 1))),
                  std::as_writable_bytes(std::span(all)));
  return all;
}

}  // namespace

long long Trainer::reservation_from(long long t) const {
  const long long every = in_.config.checkpoint_every;
  return every > 0 ? std::min(plan_.steps, t + every) : plan_.steps;
}

long long Trainer::agree_on_step(const std::vector<long long>& mine, std::string& newest,
                                 bool& any) const {
  // Each round every peer offers its newest step at or below the bound; when all offer the same
  // step it is the answer, else the bound drops to the lowest offer. The highest offer falls
  // every round, so this ends within one round per distinct step.
  long long bound = plan_.steps;
  for (std::size_t round = 0;; ++round) {
    long long offer = -1;
    for (long long st : mine) {
      if (st <= bound) offer = st;
    }
    const auto all = gather(in_.comm, offer);
    if (round == 0) {
      any = *std::max_element(all.begin(), all.end()) >= 0;
      for (std::size_t r = 0; r < all.size(); ++r) {
        newest += (r ? ", " : "") + std::string("rank ") + std::to_string(r) + ": " +
                  (all[r] < 0 ? std::string("none") : "step " + std::to_string(all[r]));
      }
    }
    const auto [lo, hi] = std::minmax_element(all.begin(), all.end());
    if (*lo == *hi) return *lo;
    bound = *lo;
  }
}

Progress Trainer::start_checkpoints(RunState& s, TrainSummary& summary) {
  const TrainConfig& c = in_.config;
  const bool async = world() > 1 && algo_info(c.algo).asynchronous;
  stop_check_every_ = c.stop_check_every > 0 ? c.stop_check_every : (async ? 0 : kStopCheckEvery);
  Progress p;
  if (c.checkpoint_dir.empty()) return p;
  checkpoints_ = std::make_unique<CheckpointDir>(c.checkpoint_dir, rank(), c.checkpoint_keep);
  checkpoints_->set_run_id(run_id_);
  const CheckpointDir& dir = *checkpoints_;
  if (!c.resume) {
    if (dir.has_history()) {
      fail(Code::failed_precondition,
           "train: " + dir.folder() + " holds the checkpoints or the privacy ledger of an earlier "
           "run: pass --resume to continue it, or give another --checkpoint-dir (starting over "
           "here would spend the privacy budget again without counting what was spent)");
    }
    dir.reserve(reservation_from(0));
    return p;
  }
  checkpoints_->set_run_id(run_id_);
  const RunIdentity id{c, plan_, rank(), world(), in_.data.train.rows, run_id_};
  std::vector<long long> mine;
  for (long long st : dir.valid_steps(warn)) {
    check_same_run(dir.read(st), id);  // another run's checkpoint is an error, not damage
    mine.push_back(st);
  }
  std::string newest;
  bool any = false;
  const long long common = agree_on_step(mine, newest, any);
  if (common < 0 && any) {
    fail(Code::failed_precondition,
         "train: --resume: no checkpoint step is held intact by every peer (newest valid per "
         "peer: " + newest + "); restore the missing files or start a new run in another "
         "--checkpoint-dir");
  }
  std::optional<long long> ledger = dir.reserved();
  if (!ledger && common >= 0) {
    fail(Code::data_loss, "train: " + dir.folder() + "/ledger.json is missing: the steps taken "
                          "after the newest checkpoint cannot be counted");
  }
  // A ledger is written before the steps it covers: never below this peer's newest checkpoint,
  // never past the plan. Outside that it was edited or damaged, and the worst case is counted.
  const long long newest_here = mine.empty() ? 0 : mine.back();
  if (ledger && (*ledger < newest_here || *ledger > plan_.steps)) {
    DPG_WARN("train: " << dir.folder() << "/ledger.json: /reserved_until " << *ledger
                       << " is impossible ("
                       << (*ledger > plan_.steps
                               ? "past the plan's " + std::to_string(plan_.steps) + " steps"
                               : "below this peer's newest checkpoint, step " +
                                     std::to_string(newest_here))
                       << "): the ledger is damaged; counting the worst case, that this peer "
                          "reached the plan's last step");
    ledger = plan_.steps;
  }
  bool exact = c.noise_seed != 0 && !algo_info(c.algo).asynchronous;
  std::optional<Checkpoint> ck;
  if (common >= 0) {
    ck = dir.read(common);
    exact = exact && ck->meta.value("threads", 0) == c.threads;
    p = restore_run_state(s, *ck, id);
    s.algorithm->restore(common, *ck);
    check_same_model(s, common);
    dir.remove_after(common);  // an abandoned continuation's
  }
  const auto reached = gather(in_.comm, ledger.value_or(0));
  const auto exacts = gather(in_.comm, exact ? 1 : 0);
  const long long reach = *std::max_element(reached.begin(), reached.end());
  exact = *std::min_element(exacts.begin(), exacts.end()) == 1;
  start_step_ = p.step;
  summary.resumed_from = p.step;
  summary.dropped_examples = p.dropped;
  summary.skipped_batches = p.skipped;
  const long long replayed = std::max(0LL, reach - p.step);
  if (replayed > 0 && !exact && c.dp) {
    plan_.charge(s.accountant, s.message_accountant, replayed);
    summary.replay_charged_steps = replayed;
    DPG_WARN("train: resuming from step " << p.step << ", but a peer may have reached step "
                                          << reach << " before it stopped, and those steps will "
                                          << "not be repeated exactly: the accountants count "
                                          << replayed << " more steps");
    Checkpoint charged = save_run_state(s, p, id);
    s.algorithm->save(p.step, charged);
    dir.write(p.step, charged);
    reserved_floor_ = 0;
  } else {
    reserved_floor_ = exact ? reach : 0;
  }
  dir.reserve(std::max(reserved_floor_, reservation_from(p.step)));
  if (rank() == 0) {
    DPG_INFO("train: " << (common >= 0 ? "resuming from step " + std::to_string(common)
                                       : std::string("no checkpoint anywhere; starting afresh"))
                       << " (newest per peer: " << newest << "); epsilon so far "
                       << (c.dp ? s.accountant.spent(c.delta).epsilon : 0.0));
  }
  return p;
}

void Trainer::settle_run_id() {
  const TrainConfig& c = in_.config;
  constexpr std::size_t kIdBytes = 32;  // hex of 16 random bytes
  std::string mine;
  bool have = false, orphans = false;
  if (c.resume) {
    const CheckpointDir dir(c.checkpoint_dir, rank(), c.checkpoint_keep);
    const auto id = dir.ledger_run_id();
    have = id.has_value();
    mine = id.value_or("");
    if (mine.size() > kIdBytes) mine.resize(kIdBytes);  // not one of ours: it will not match
    // Checkpoint files (regular ones: a FIFO or a folder in a checkpoint's name is named as
    // such when the checkpoints are read) without a ledger.
    const std::vector<long long> steps = have ? std::vector<long long>{} : dir.listed();
    orphans = std::any_of(steps.begin(), steps.end(), [&](long long st) {
      std::error_code ec;
      return std::filesystem::is_regular_file(dir.path_of(st), ec);
    });
  }
  // Each peer's, as "+" then the id (padded), "-" when it has no ledger, or "!" when it has
  // checkpoints but no ledger (its ledger was deleted: what it spent cannot be known).
  std::string slot(1 + kIdBytes, ' ');
  slot[0] = have ? '+' : orphans ? '!' : '-';
  std::copy(mine.begin(), mine.end(), slot.begin() + 1);
  std::string all = slot;
  if (in_.comm) {
    all.assign(slot.size() * static_cast<std::size_t>(world()), ' ');
    in_.comm->allgather(public_value(std::as_bytes(std::span<const char>(slot))),
                        std::as_writable_bytes(std::span<char>(all)));
  }
  bool same = true;
  std::string listed, without;
  for (int r = 0; r < world(); ++r) {
    const std::string theirs = all.substr(static_cast<std::size_t>(r) * slot.size(), slot.size());
    if (theirs[0] == '!') {
      if (!without.empty()) without += ", ";
      without += std::to_string(r);
    }
    same = same && theirs == all.substr(0, slot.size());
    std::string shown = theirs.substr(1);
    shown.erase(shown.find_last_not_of(' ') + 1);
    listed += (r ? ", " : "") + std::string("rank ") + std::to_string(r) + ": " +
              (theirs[0] != '+' ? std::string("no ledger")
                                : shown.empty() ? std::string("a ledger without a run id")
                                                : "run " + shown);
  }
  if (!without.empty()) {
    std::string msg = "train: --resume: ledger.json is missing beside the checkpoints of ";
    msg += without.find(',') != std::string::npos ? "ranks " : "rank ";
    msg += without;
    msg += " (in " + c.checkpoint_dir + "): the steps taken after the newest checkpoint cannot be "
           "counted; restore the ledger, or start a new run in another --checkpoint-dir";
    fail(Code::data_loss, msg);
  }
  if (!same) {
    fail(Code::failed_precondition,
         "train: --resume: the peers' checkpoint folders (" + c.checkpoint_dir +
             ") belong to different runs (by their ledgers: " + listed + "): a folder or ledger "
             "of another run was put in place; restore each peer's own folder, or start a new "
             "run in another --checkpoint-dir");
  }
  if (have) {
    run_id_ = mine;  // this run goes on: its id stays
    return;
  }
  // A new run: rank 0 draws its id (not a secret; unique, so no other run's files match).
  std::string id(kIdBytes, '0');
  if (rank() == 0) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::vector<std::byte> draw(id.size());
    os_random(draw, "the run id");
    for (std::size_t i = 0; i < id.size(); ++i) id[i] = kHex[static_cast<unsigned>(draw[i]) % 16];
  }
  if (in_.comm) in_.comm->broadcast(public_value(std::as_writable_bytes(std::span<char>(id))), 0);
  run_id_ = id;
}

void Trainer::check_same_model(const RunState& s, long long step) const {
  // An asynchronous algorithm's peers stop at one step with models of their own.
  if (!in_.comm || s.algorithm->replicas_differ() || algo_info(in_.config.algo).asynchronous) {
    return;
  }
  const std::span<const float> w = s.model.params();
  const auto hash = static_cast<long long>(
      fnv1a64(std::string_view(reinterpret_cast<const char*>(w.data()), w.size_bytes())) >> 1);
  const auto all = gather(in_.comm, hash);
  std::string differ;
  for (int r = 1; r < world(); ++r) {
    if (all[static_cast<std::size_t>(r)] != all[0]) differ += " " + std::to_string(r);
  }
  if (!differ.empty()) {
    fail(Code::data_loss,
         "train: --resume: at step " + std::to_string(step) + " rank(s)" + differ +
             " restored another model than rank 0, where " + to_string(in_.config.algo) +
             " keeps one model on every peer: a checkpoint of another run or step was put in "
             "place; restore the peers' own folders");
  }
}

std::optional<CheckpointDir::Finished> Trainer::finished_before() const {
  const TrainConfig& c = in_.config;
  if (!c.resume || c.checkpoint_dir.empty()) return std::nullopt;
  const CheckpointDir dir(c.checkpoint_dir, rank(), c.checkpoint_keep);
  const auto f = dir.finished();
  const std::string hash = std::to_string(training_settings_hash(c));
  if (f && f->training_hash != hash) {
    fail(Code::invalid_argument,
         "train: " + dir.folder() + "/ledger.json: /finished: written by a finished run under "
         "another configuration (" + settings_difference(f->training, c) +
         "); a resumed run must be the run that wrote it");
  }
  const bool mine = f && f->step == plan_.steps;
  const auto all = gather(in_.comm, mine ? 1 : 0);
  const long long done = std::count(all.begin(), all.end(), 1LL);
  if (done == static_cast<long long>(all.size())) {
    if (rank() == 0) {
      DPG_INFO("train: --resume: the run in " << c.checkpoint_dir << " finished: every peer took "
                                              << plan_.steps << " of " << plan_.steps
                                              << " steps (epsilon " << f->epsilon
                                              << "); nothing to train, nothing charged");
    }
    return f;
  }
  if (done > 0 && rank() == 0) {
    DPG_WARN("train: --resume: " << done << " of " << all.size()
                                 << " peers finished the run, the others did not: resuming "
                                    "from the newest checkpoint every peer holds");
  }
  return std::nullopt;
}

void Trainer::mark_finished(const TrainSummary& summary) const {
  if (!checkpoints_ || summary.already_finished) return;
  checkpoints_->mark_finished({.step = plan_.steps,
                               .training_hash = std::to_string(training_settings_hash(in_.config)),
                               .training = training_settings(in_.config),
                               .epsilon = summary.epsilon});
}

bool Trainer::at_boundary(RunState& s, const Progress& p, bool epoch_start) {
  const long long t = p.step;
  const long long every = in_.config.checkpoint_every;
  const bool checkpoint_due = checkpoints_ && every > 0 && t % every == 0 && t != start_step_;
  const bool check_due = epoch_start || (stop_check_every_ > 0 && t % stop_check_every_ == 0);
  if (!checkpoint_due && !check_due) return false;
  bool stop = in_.hooks.stop != nullptr && in_.hooks.stop->load(std::memory_order_relaxed);
  if (in_.comm) {
    double flags = stop ? 1.0 : 0.0;
    in_.comm->allreduce(public_value(std::span<double>(&flags, 1)), collective::Reduce::sum);
    stop = flags > 0;
  }
  if (stop && rank() == 0) {
    DPG_INFO("train: stopping at step " << t << " on a signal"
                                        << (checkpoints_ ? ", after a checkpoint" : ""));
  }
  if ((stop || checkpoint_due) && checkpoints_) {
    write_checkpoint(s, p, stop);
    if (in_.comm) in_.comm->barrier();
  }
  return stop;
}

void Trainer::write_checkpoint(RunState& s, const Progress& p, bool stopping) {
  trace::Span span(in_.tracer, "checkpoint", "io");
  pull_model(s, true);
  const RunIdentity id{in_.config, plan_, rank(), world(), in_.data.train.rows, run_id_};
  Checkpoint ck = save_run_state(s, p, id);
  s.algorithm->save(p.step, ck);
  checkpoints_->write(p.step, ck);
  // A stopped run has taken exactly p.step steps; a running one reserves the steps to its next
  // checkpoint before taking them.
  checkpoints_->reserve(std::max(reserved_floor_, stopping ? p.step : reservation_from(p.step)));
}

}  // namespace dpg::train
