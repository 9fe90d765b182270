#include "runtime/train/trainer.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>

#include "dp/pld.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/core/range.h"
#include "runtime/model/mlp.h"
#include "runtime/train/algorithm.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/run_state.h"

namespace dpg::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Hands the heap's free pages back to the system after the accountant's work (the plan's
// calibration, an epoch's report): its arrays of megabytes differ in size from one evaluation
// to the next, so the allocator keeps what they freed and the next larger window does not fit
// in it; left there, that is a peer's largest block of memory (docs/BENCHMARKS.md, "A peer's
// memory"). Once after the plan and once an epoch: cheap beside the reports themselves.
// Under a sanitizer the heap is the sanitizer's, not glibc's: glibc's arenas were never set
// up, and two trainers in one process would race to set them up inside malloc_trim (a SEGV
// in mtrim under ASan), for no pages to give back. So it does nothing there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DPG_SANITIZED_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define DPG_SANITIZED_HEAP 1
#endif
#endif
void release_free_memory() {
#ifndef DPG_SANITIZED_HEAP
  malloc_trim(0);
#endif
}

}  // namespace

struct Trainer::Loop {
  Loop(const std::function<void(const EpochReport&)>& e,
       const std::function<void(const ConsensusReport&)>& c)
      : on_epoch(e), on_consensus(c) {}
  const std::function<void(const EpochReport&)>& on_epoch;
  const std::function<void(const ConsensusReport&)>& on_consensus;
  Progress p;
  TrainSummary summary;
  double metrics_seconds = 0;  // spent on consensus reports in the current epoch
  bool differ = false;         // the replicas differ between synchronisations
};

Trainer::Trainer(RunInputs in) : in_(std::move(in)) {
  const log::RankScope scope(in_.comm ? rank() : -1);  // this thread acts for this rank (log.h)
  check_run(in_);
  plan_ = plan_run(in_);
  // The plan's check composed the whole run's steps: a peer whose lines nobody reads asks the
  // accountant nothing more until its end (and then only for its ledger), so the buffers and
  // plans that check made go back. Rank 0's serve its reports.
  if (!in_.reports_read) dp::pld_release_memory();
  release_free_memory();
}

Trainer::Trainer(TrainConfig config, data::Prepared data, collective::Communicator* comm,
                 std::vector<GossipPhase> phases, trace::Tracer* tracer)
    : Trainer([&] {
        RunInputs in;
        in.config = std::move(config);
        in.data = std::move(data);
        in.comm = comm;
        in.phases = std::move(phases);
        in.tracer = tracer;
        return in;
      }()) {}

Trainer::~Trainer() = default;

std::span<const float> Trainer::params() const {
  return state_ ? std::span<const float>(state_->model.params()) : std::span<const float>();
}

void Trainer::log_start() const {
  const TrainConfig& c = in_.config;
  DPG_INFO("train: one of " << world() << " peers, " << to_string(c.algo) << ", "
           << in_.data.train.rows << " examples here ("
                          << std::llround(c.batch_size / plan_.q)
                          << " in all), q = " << plan_.q << " (this peer samples at "
                          << plan_.peer_q[static_cast<std::size_t>(rank())] << "), "
                          << plan_.steps << " steps, " << (c.dp ? "DP-SGD" : "plain SGD")
                          << ", noise multiplier " << plan_.sigma << " (each peer adds "
                          << plan_.peer_sigma << ", " << plan_.noise_mode
                          << " noise; the model's " << plan_.model_sigma << "), clip "
                          << c.clip_norm
                          << (!c.secure_noise ? ""
                              : c.secure_aggregation
                                  ? ", noise from ChaCha20 under a 256-bit key from the OS "
                                    "(Skellam on secure aggregation's grid)"
                                  : ", noise from ChaCha20 under a 256-bit key from the OS "
                                    "(examples summed and noised on an integer grid)")
                          << (c.secure_noise ? ", sampler seed secret (OS entropy)"
                              : c.noise_seed != 0 ? ", noise seed from the config"
                                                  : ", noise seed secret (OS entropy)"));
  if (state_ && state_->pass_rows > 0) {
    const std::size_t rows = state_->pass_rows;
    const std::string cap = rows == static_cast<std::size_t>(c.physical_batch)
                                ? ""
                                : " (what --batch-memory " + number_text(c.batch_memory_mib) +
                                      " MiB holds)";
    DPG_INFO("train: virtual batches of at most " << rows << " examples a pass" << cap
             << ": their clipped sums add up, noised once a step");
  }
  if (c.dp && c.sampling != Sampling::poisson) {
    DPG_WARN("train: sampling is 'shuffle'; the reported epsilon assumes Poisson sampling");
  }
}

ConsensusReport Trainer::consensus_head(const RunState& s, long long round) const {
  ConsensusReport r;
  r.round = round;
  r.epoch = static_cast<double>(round) * plan_.q;
  const Spent e = reported_spent(s, round);
  r.epsilon = e.model.epsilon;
  r.message_epsilon = e.messages;
  r.split = to_string(in_.config.eval_split);
  if (plan_.secure_aggregation) r.extra["peers_epsilon"] = e.messages;
  s.algorithm->annotate(r.extra, round, false);
  return r;
}

ConsensusReport Trainer::consensus(RunState& s, long long round, bool eval) const {
  trace::Span span(in_.tracer, "consensus", "eval");
  pull_model(s, false);
  ConsensusReport r = consensus_head(s, round);
  r.consensus_distance = consensus_distance(*in_.comm, s.model.params(), s.scratch);
  if (eval && in_.config.metrics_eval_rows > 0) {
    // The mean of the iterates (left in s.scratch above), then each peer's own iterate.
    const std::size_t rows = static_cast<std::size_t>(in_.config.metrics_eval_rows);
    std::copy(s.scratch.begin(), s.scratch.end(), s.released.params().begin());
    const auto ev = s.evaluator->shared(s.released, s.eval_ws, rows);
    r.eval_rows = static_cast<long long>(ev.rows);
    r.test_accuracy = accuracy_of(ev);
    r.test_loss = loss_of(ev);
    s.evaluator->per_peer(s.model, s.eval_ws, rows, r.peer_test_accuracy, r.peer_test_loss);
  }
  r.wall_s = seconds_since(s.start);
  return r;
}

std::vector<double> Trainer::peer_epsilons_of(const std::vector<RatesFrom>& rates,
                                              long long t) const {
  // Each peer's own history of (rate, the model's multiplier, steps), composed afresh.
  std::vector<double> out;
  for (std::size_t j = 0; j < static_cast<std::size_t>(world()); ++j) {
    dp::Accountant account = plan_.new_account();
    for (std::size_t k = 0; k < rates.size(); ++k) {
      const long long end = k + 1 < rates.size() ? std::min(t, rates[k + 1].from) : t;
      if (end > rates[k].from) {
        account.step(rates[k].peer_q[j], plan_.model_sigma, end - rates[k].from);
      }
    }
    out.push_back(account.spent(plan_.delta).epsilon);
  }
  return out;
}

Trainer::Spent Trainer::spent(const RunState& s, long long t) const {
  if (!plan_.dp) return {plan_.model_after(t), plan_.messages_after(t).epsilon};
  return {s.accountant.spent(in_.config.delta), s.message_accountant.spent(in_.config.delta).epsilon};
}

Trainer::Spent Trainer::reported_spent(const RunState& s, long long t) const {
  if (in_.reports_read) return spent(s, t);
  const double none = std::numeric_limits<double>::quiet_NaN();
  return {{none, none}, none};
}

EpochReport Trainer::evaluate_epoch(RunState& s, int epoch, long long t,
                                    const EpochTotals& totals) const {
  trace::Span span(in_.tracer, "eval", "eval");
  pull_model(s, false);
  const std::span<const float> mine =
      s.ema ? s.ema->values() : std::span<const float>(s.model.params());
  s.algorithm->release(mine, s.released.params());
  const auto ev = s.evaluator->shared(s.released, s.eval_ws);
  EpochReport r;
  r.epoch = epoch;
  r.step = t;
  r.loss = totals.seen > 0 ? totals.loss_sum / totals.seen : 0.0;
  r.train_accuracy = totals.seen > 0 ? static_cast<double>(totals.correct) / totals.seen : 0.0;
  r.split = to_string(in_.config.eval_split);
  r.test_accuracy = accuracy_of(ev);
  r.test_loss = loss_of(ev);
  const Spent e = reported_spent(s, t);
  r.epsilon = e.model.epsilon;
  r.message_epsilon = e.messages;
  r.lr = s.lr;
  if (plan_.secure_aggregation) r.extra["peers_epsilon"] = e.messages;
  s.algorithm->annotate(r.extra, t, false);
  if (s.algorithm->replicas_differ() && in_.comm) {
    // At a K-step round the report is already made (the same all-reduce would give the same).
    const auto c = s.last_consensus && s.last_consensus->round == t ? *s.last_consensus
                                                                    : consensus(s, t, false);
    r.consensus_distance = c.consensus_distance;
    // Each peer's own model (its average when on), on the whole test split.
    std::copy(mine.begin(), mine.end(), s.released.params().begin());
    s.evaluator->per_peer(s.released, s.eval_ws, eval_data().rows, r.peer_test_accuracy,
                          r.peer_test_loss);
  }
  return r;
}

long long Trainer::epoch_end(int epoch) const {
  // The last epoch ends at the plan's step count, whatever the rounding of epoch / q.
  const int epochs = epoch_count(in_.config);
  if (epoch <= 0) return 0;
  if (epoch >= epochs) return plan_.steps;
  return std::min<long long>(plan_.steps,
                             static_cast<long long>(std::ceil(epoch / plan_.q - 1e-9)));
}

TrainSummary Trainer::run(const std::function<void(const EpochReport&)>& on_epoch,
                          const std::function<void(const ConsensusReport&)>& on_consensus) {
  const log::RankScope scope(in_.comm ? rank() : -1);
  // A step that fails on a check of its own (a malformed reply, a held step) can leave messages
  // posted into or out of the run state's buffers (the algorithm's among them), which go when
  // this trainer does: the transport must move no more bytes through them, and the peers learn
  // now that this one has stopped, and why.
  const auto poison = [this](const std::string& why) {
    if (!in_.comm) return;
    in_.comm->transport().poison(Code::aborted, rank_prefix(rank()) + "stopped on an error of its own: " +
                                                    without_rank_prefix(why, rank()));
  };
  try {
    return run_steps(on_epoch, on_consensus);
  } catch (const std::exception& e) {
    poison(e.what());
    poll_.reset();
    throw;
  } catch (...) {
    poison("(see its log)");
    poll_.reset();
    throw;
  }
}

TrainSummary Trainer::run_steps(const std::function<void(const EpochReport&)>& on_epoch,
                                const std::function<void(const ConsensusReport&)>& on_consensus) {
  Loop loop(on_epoch, on_consensus);
  if (!in_.config.checkpoint_dir.empty()) settle_run_id();
  if (const auto done = finished_before()) {
    loop.summary.already_finished = true;
    loop.summary.epsilon = done->epsilon;
    loop.summary.peers = world();
    loop.summary.steps = plan_.steps;
    return loop.summary;
  }
  start(loop);
  const int epochs = epoch_count(in_.config);
  int epoch = 1;
  while (epoch < epochs && epoch_end(epoch) <= loop.p.step) ++epoch;  // the epoch of step p.step
  for (; epoch <= epochs; ++epoch) {
    if (!run_epoch(loop, epoch)) break;
  }
  return finish(loop);
}

void Trainer::start(Loop& loop) {
  state_ = build_state(in_, plan_);
  RunState& s = *state_;
  log_start();
  loop.summary.peers = world();
  loop.summary.steps = plan_.steps;
  loop.p = start_checkpoints(s, loop.summary);
  if (s.resident) {
    push_model(s);  // the broadcast's or the checkpoint's model and momentum
    DPG_INFO("train: the model and its updates stay on the device");
  }
  loop.differ = s.algorithm->replicas_differ() && in_.comm != nullptr;
  if (loop.differ && in_.config.metrics_every > 0 && algo_info(in_.config.algo).asynchronous &&
      !s.resident) {
    poll_ = std::make_unique<ConsensusPoll>(
        in_.comm->transport(), s.spec, in_.config.metrics_every, eval_data(),
        static_cast<std::size_t>(std::max(0, in_.config.metrics_eval_rows)), in_.tracer);
  }
  s.start = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(loop.p.wall_seconds));
  if (loop.p.step == 0) report_consensus(loop, 0);  // a resumed run reported its start already
  loop.metrics_seconds = 0;  // before the first epoch's clock starts: not to be taken off its time
}

void Trainer::report_consensus(Loop& loop, long long round) {
  const long long every = in_.config.metrics_every;
  RunState& s = *state_;
  if (poll_) {
    const auto fill = [&s](std::span<float> out) {
      s.algorithm->current_model(s.model.params(), out);
    };
    const auto head = [&] {
      ConsensusReport r = consensus_head(s, round);
      r.wall_s = seconds_since(s.start);
      return r;
    };
    if (auto r = poll_->boundary(round, fill, head); r && loop.on_consensus) loop.on_consensus(*r);
    return;
  }
  if (!loop.differ || every <= 0 || round % every != 0) return;
  // Waiting here for slower peers is training time (local SGD's peers meet only every H
  // steps, so their skew is whole steps): only what follows the barrier is metrics.
  in_.comm->barrier();
  const auto begin = Clock::now();
  s.last_consensus = consensus(s, round, true);
  if (loop.on_consensus) loop.on_consensus(*s.last_consensus);
  loop.metrics_seconds += seconds_since(begin);
}

void Trainer::take_rows(RunState& s, data::Dataset rows) {
  if (s.device) fail(Code::failed_precondition, "train: rows cannot move to a GPU mid-run");
  in_.data.train = std::move(rows);
  resample(s);
}

void Trainer::take_rates(RunState& s, std::vector<double> rates, long long step) {
  if (static_cast<int>(rates.size()) != world()) {
    fail(Code::internal, "train: a rate per peer, not " + std::to_string(rates.size()));
  }
  for (double q : rates) {
    if (!(q > 0 && q <= plan_.calibration_q() * (1 + 1e-12))) {
      fail(Code::internal, "train: a balancer's rate " + std::to_string(q) +
                               " is past the rate the noise was calibrated for, " +
                               std::to_string(plan_.calibration_q()));
    }
  }
  s.rates.push_back({step, std::move(rates)});
  resample(s);
}

void Trainer::resample(RunState& s) {
  const double q = s.rates.back().peer_q[static_cast<std::size_t>(rank())];
  const std::size_t n = in_.data.train.rows;
  // The sampler goes on with its generator where it was: later batches stay independent.
  if (s.poisson) {
    s.poisson.emplace(n, q, Rng::from_state(s.poisson->rng_state()));
  } else {
    s.shuffle.emplace(n, static_cast<std::size_t>(std::max(1.0, std::round(q * n))),
                      Rng::from_state(s.shuffle->rng_state()));
  }
}

bool Trainer::run_epoch(Loop& loop, int epoch) {
  RunState& s = *state_;
  Progress& p = loop.p;
  const long long end = epoch_end(epoch);
  if (epoch > 1 && p.step == epoch_end(epoch - 1) && p.step < end) {
    if (in_.hooks.rebalance) {
      if (std::optional<data::Dataset> rows = in_.hooks.rebalance(epoch, p.step)) {
        take_rows(s, std::move(*rows));
      }
    }
    if (in_.hooks.rerate) {
      if (std::optional<std::vector<double>> rates = in_.hooks.rerate(epoch, p.step)) {
        take_rates(s, std::move(*rates), p.step);
      }
    }
  }
  const auto epoch_start = Clock::now();
  const double train_before = p.train_seconds;
  for (; p.step < end; ++p.step) {
    p.train_seconds = train_before + seconds_since(epoch_start) - loop.metrics_seconds;
    p.wall_seconds = seconds_since(s.start);
    if (at_boundary(s, p, p.step == epoch_end(epoch - 1))) {
      loop.summary.stopped_at = p.step;
      pull_model(s, false);
      park_poll(p.step);
      s.algorithm->finish(s.model.params());
      close_poll(loop);
      return false;
    }
    if (in_.hooks.step) in_.hooks.step(p.step, s.model.params());
    EpochTotals totals{p.loss_sum, p.seen, p.correct};
    step(s, p.step, totals, loop.summary);
    p.loss_sum = totals.loss_sum;
    p.seen = totals.seen;
    p.correct = totals.correct;
    p.dropped = loop.summary.dropped_examples;
    p.skipped = loop.summary.skipped_batches;
    report_consensus(loop, p.step + 1);
  }
  park_poll(p.step);  // the epoch's end: the peers meet (and at the last, finish)
  if (p.step == plan_.steps) {
    pull_model(s, false);
    s.algorithm->finish(s.model.params());
    close_poll(loop);
  }
  p.train_seconds = train_before + seconds_since(epoch_start) - loop.metrics_seconds;
  loop.metrics_seconds = 0;
  report_epoch(loop, epoch);
  release_free_memory();
  return true;
}

void Trainer::report_epoch(Loop& loop, int epoch) {
  RunState& s = *state_;
  Progress& p = loop.p;
  // Training loss and accuracy come from this peer's private batches and leave it only with
  // report_train_metrics (they are not noised); throughput counts the public expected batch
  // size, one peer alone included, never the realised (private) batches.
  const long long steps = epoch_end(epoch) - epoch_end(epoch - 1);
  p.samples += static_cast<long long>(
      std::llround(static_cast<double>(steps) * in_.config.batch_size));
  EpochReport r = evaluate_epoch(s, epoch, p.step, {p.loss_sum, p.seen, p.correct});
  r.wall_s = seconds_since(s.start);
  r.samples_per_second = throughput(static_cast<double>(p.samples), p.train_seconds);
  r.report_dropped = in_.config.report_dropped;
  r.report_train = in_.config.report_train_metrics;
  r.dropped_examples = p.dropped - p.epoch_dropped_before;
  r.skipped_batches = p.skipped - p.epoch_skipped_before;
  if (in_.tracer && std::isfinite(r.epsilon)) in_.tracer->counter("epsilon", r.epsilon);
  loop.on_epoch(r);
  loop.summary.evaluated = true;
  loop.summary.test_accuracy = r.test_accuracy;
  loop.summary.peer_test_accuracy = r.peer_test_accuracy;
  p.loss_sum = 0;
  p.seen = p.correct = 0;
  p.epoch_dropped_before = p.dropped;
  p.epoch_skipped_before = p.skipped;
}

void Trainer::park_poll(long long step) {
  if (!poll_) return;
  RunState& s = *state_;
  poll_->park(step, [&s](std::span<float> out) {
    s.algorithm->current_model(s.model.params(), out);
  });
}

void Trainer::close_poll(Loop& loop) {
  if (!poll_) return;
  RunState& s = *state_;
  const auto r = poll_->close(loop.p.step, [&s](std::span<float> out) {
    s.algorithm->current_model(s.model.params(), out);
  });
  poll_.reset();
  if (r && loop.on_consensus) loop.on_consensus(*r);
}

TrainSummary Trainer::finish(Loop& loop) {
  RunState& s = *state_;
  const Progress& p = loop.p;
  TrainSummary& summary = loop.summary;
  const long long taken = p.step + summary.replay_charged_steps;
  // The accountant's figures first, and what the accountant kept to make them sooner handed
  // back, before the last evaluation's meeting: once past it the other peers may end, and a
  // peer left alone holds the libraries' pages they shared (its proportional memory grows by
  // them) while it ends. A peer whose lines nobody reads makes them only for its ledger.
  const Spent e = checkpoints_ ? spent(s, taken) : reported_spent(s, taken);
  summary.epsilon = e.model.epsilon;
  summary.best_alpha = e.model.best_alpha;
  summary.message_epsilon = e.messages;
  if (plan_.release == dp::Release::own && world() > 1 && in_.reports_read) {
    summary.peer_epsilons = s.rates.size() > 1 ? peer_epsilons_of(s.rates, taken)
                                                : plan_.peer_epsilons_after(taken);
  }
  dp::pld_release_memory();
  release_free_memory();
  pull_model(s, true);  // the model and optimiser params() and the caller see
  if (summary.stopped_at < 0) {
    s.algorithm->release(s.model.params(), s.released.params());
    summary.test_accuracy_last_iterate = accuracy_of(s.evaluator->shared(s.released, s.eval_ws));
  }
  if (plan_.secure_aggregation) {
    summary.extra["peers_epsilon"] = e.messages;
    summary.extra["secure_aggregation"] = {{"grid_scale", plan_.secagg.grid_scale},
                                           {"skellam_mu", plan_.secagg.mu},
                                           {"l1_sensitivity", plan_.secagg.l1},
                                           {"l2_sensitivity", plan_.secagg.l2},
                                           {"overflow_bound", plan_.secagg.overflow_bound}};
  }
  s.algorithm->annotate(summary.extra, p.step, true);
  summary.samples_per_second = throughput(static_cast<double>(p.samples), p.train_seconds);
  summary.wall_s = seconds_since(s.start);
  summary.dropped_examples = p.dropped;
  summary.skipped_batches = p.skipped;
  summary.accountant = s.accountant.to_json();
  if (summary.stopped_at < 0) mark_finished(summary);
  return summary;
}

}  // namespace dpg::train
