#include "runtime/train/consensus_poll.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/net/link_counters.h"
#include "runtime/net/ops.h"
#include "runtime/train/evaluate.h"

namespace dpg::train {
namespace {

enum Op : uint32_t { kPoll = 0, kIdle = 1 };
constexpr std::size_t kStepBytes = sizeof(std::int64_t);
constexpr long long kMissing = -1;  // a reply's step when the peer's training thread was busy
// Requests in flight at once, a reply buffer each: at least 16, and enough that the peers are
// asked in at most three windows, each waiting at most a quarter of the timeout for a busy peer,
// so that no responder waits longer than the timeout for its request.
std::size_t window(int world) {
  return std::max<std::size_t>(16, (static_cast<std::size_t>(world) - 1 + 2) / 3);
}

std::string prefix(int rank) { return rank_prefix(rank) + "consensus poll: "; }

}  // namespace

void Spread::add(std::span<const float> x) {
  // Welford's update, per value: no sum of squares to cancel against the squared sum.
  ++count_;
  const double n = static_cast<double>(count_);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i], before = mean_[i];
    mean_[i] += (v - before) / n;
    squares_ += (v - before) * (v - mean_[i]);
  }
}

void Spread::mean(std::span<float> out) const {
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(mean_[i]);
}

double Spread::distance() const {
  return count_ == 0 ? 0.0 : squares_ / static_cast<double>(count_);
}

ConsensusPoll::ConsensusPoll(net::Transport& t, const model::MlpSpec& spec, long long every,
                             const data::Dataset& eval, std::size_t eval_rows,
                             trace::Tracer* tracer)
    : t_(t),
      rank_(t.rank()),
      world_(t.world()),
      every_(every),
      values_(static_cast<std::size_t>(spec.param_count())),
      eval_(eval),
      eval_rows_(std::min(eval_rows, eval.rows)),
      tracer_(tracer),
      service_(t, net::kOpReport, "consensus poll",
               {{0, kStepBytes + values_ * sizeof(float)}, {0, 0, true}}, tracer),
      snap_(values_, 0.0f),
      scorer_(spec, 0) {
  if (rank_ != 0) {
    serve();
  } else {
    thread_ = std::thread([this] { run(); });
  }
}

ConsensusPoll::~ConsensusPoll() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ConsensusPoll::serve() {
  using Reply = collective::Service::Reply;
  // A request waits for the training thread's next boundary, up to a quarter of the transport's
  // timeout (a step, a checkpoint or an evaluation may take that long): then it says the peer was
  // busy, and rank 0's report leaves this peer out rather than failing.
  const auto patience = t_.timeout() / 4;
  service_.serve({0}, 0, [this, patience](const collective::Service::Request& r,
                                          Wire<const std::byte>, Reply& out) {
    if (r.op != kPoll) return;
    std::unique_lock lock(mu_);
    asked_ = !closed_ && !parked_;
    cv_.wait_for(lock, patience, [&] { return ready_ || closed_ || parked_ || stopping_; });
    const bool have = ready_ || closed_ || parked_;
    const std::int64_t step = have ? snap_step_ : kMissing;
    out.put(0, public_value(std::as_bytes(std::span(&step, 1))));
    if (have) out.put(kStepBytes, public_model(std::span<const float>(snap_)).bytes());
    ready_ = asked_ = false;
  });
}

std::optional<ConsensusReport> ConsensusPoll::boundary(
    long long step, const Fill& fill, const std::function<ConsensusReport()>& head) {
  if (rank_ != 0) {
    std::unique_lock lock(mu_);
    parked_ = false;  // the model moves on from here
    if (!asked_ || ready_) return std::nullopt;
    fill(snap_);  // under the lock: the responder reads snap_ once it is ready
    snap_step_ = step;
    ready_ = true;
    lock.unlock();
    cv_.notify_all();
    return std::nullopt;
  }
  std::unique_lock lock(mu_);
  if (error_) std::rethrow_exception(error_);
  std::optional<ConsensusReport> out = std::exchange(done_, std::nullopt);
  if (step % every_ != 0) return out;
  if (busy_) {
    ++skipped_;
    return out;
  }
  lock.unlock();
  ConsensusReport h = head();  // the accountants' figures: on the training thread
  lock.lock();
  fill(snap_);
  snap_step_ = step;
  job_ = std::move(h);
  busy_ = true;
  lock.unlock();
  cv_.notify_all();
  return out;
}

void ConsensusPoll::park(long long step, const Fill& fill) {
  if (rank_ == 0) return;
  {
    std::lock_guard lock(mu_);
    fill(snap_);
    snap_step_ = step;
    parked_ = true;
  }
  cv_.notify_all();
}

std::optional<ConsensusReport> ConsensusPoll::close(long long step, const Fill& fill) {
  if (rank_ != 0) {
    {
      std::lock_guard lock(mu_);
      fill(snap_);
      snap_step_ = step;
      closed_ = true;
    }
    cv_.notify_all();
    service_.join();  // until rank 0 says it is done
    return std::nullopt;
  }
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
  thread_.join();  // it finishes the report in flight, then ends the service
  if (error_) std::rethrow_exception(error_);
  if (made_ > 0 || skipped_ > 0) {
    DPG_INFO("train: " << made_ << " consensus reports made from the peers' models without a "
                       << "meeting; " << skipped_
                       << " rounds skipped while the one before was being made");
  }
  return std::exchange(done_, std::nullopt);
}

void ConsensusPoll::run() {
  const log::RankScope scope(rank_);
  const net::OffStepThread off_step;  // rank 0's metrics: not its step
  if (tracer_) tracer_->name_thread("consensus poll");
  // Every peer's responder waits for a request within the transport's timeout: between reports
  // rank 0 tells them it is still there.
  const auto beat = t_.timeout() / 4;
  std::vector<int> servers;
  for (int r = 1; r < world_; ++r) servers.push_back(r);
  try {
    for (;;) {
      std::optional<ConsensusReport> job;
      {
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, beat, [&] { return job_.has_value() || closed_ || stopping_; });
        if (stopping_) return;
        job = std::exchange(job_, std::nullopt);
        if (!job && closed_) break;
      }
      if (!job) {
        std::vector<int> tickets;
        for (int r : servers) {
          tickets.push_back(
              service_.call(r, kIdle, 0, public_value(std::span<const std::byte>()), {}));
        }
        for (int ticket : tickets) service_.wait(ticket);
        continue;
      }
      ConsensusReport r = make(std::move(*job));
      std::lock_guard lock(mu_);
      done_ = std::move(r);
      busy_ = false;
      ++made_;
    }
    service_.finish(servers);
  } catch (...) {
    std::lock_guard lock(mu_);
    error_ = std::current_exception();
    busy_ = false;
  }
}

ConsensusReport ConsensusPoll::make(ConsensusReport r) {
  trace::Span span(tracer_, "consensus_poll", "eval");
  const std::size_t n = static_cast<std::size_t>(world_);
  Spread spread(values_);
  Json steps = Json::array();
  r.peer_test_accuracy.assign(n, 0.0);
  r.peer_test_loss.assign(n, 0.0);
  std::vector<bool> answered(n, false);
  const auto take = [&](std::size_t peer, long long step, std::span<const float> x) {
    if (step == kMissing) return;
    answered[peer] = true;
    spread.add(x);
    if (eval_rows_ > 0) score(x, r.peer_test_accuracy[peer], r.peer_test_loss[peer]);
    steps[peer] = step;
  };
  for (std::size_t p = 0; p < n; ++p) steps.push_back(nullptr);
  take(0, snap_step_, snap_);
  // Replies into a window of buffers: a request per peer, at most window() in flight.
  const std::size_t bytes = kStepBytes + values_ * sizeof(float);
  std::vector<std::vector<std::byte>> buffers(std::min(window(world_), n - 1));
  std::vector<float> x(values_);
  struct Flight {
    int peer, ticket;
    std::size_t buffer;
  };
  std::vector<Flight> flights;
  const auto land = [&](const Flight& f) {
    service_.wait(f.ticket);
    const std::vector<std::byte>& b = buffers[f.buffer];
    std::int64_t step = 0;
    std::memcpy(&step, b.data(), kStepBytes);
    if (step < kMissing) {
      service_.fail(f.peer, Code::data_loss, prefix(rank_) + "peer " + std::to_string(f.peer) +
                                                 " replied with step " + std::to_string(step));
    }
    if (step != kMissing) std::memcpy(x.data(), b.data() + kStepBytes, values_ * sizeof(float));
    take(static_cast<std::size_t>(f.peer), step, x);
  };
  for (int peer = 1; peer < world_; ++peer) {
    std::size_t slot = flights.size();
    if (flights.size() == buffers.size()) {
      land(flights.front());
      slot = flights.front().buffer;
      flights.erase(flights.begin());
    }
    buffers[slot].resize(bytes);
    flights.push_back({peer,
                       service_.call(peer, kPoll, static_cast<uint64_t>(r.round),
                                     public_value(std::span<const std::byte>()), buffers[slot]),
                       slot});
  }
  for (const Flight& f : flights) land(f);
  r.consensus_distance = spread.distance();
  r.extra["peer_steps"] = steps;
  r.extra["peers_reported"] = static_cast<long long>(spread.count());
  if (eval_rows_ > 0) {
    spread.mean(x);
    double accuracy = 0, loss = 0;
    score(x, accuracy, loss);
    r.eval_rows = static_cast<long long>(eval_rows_);
    r.test_accuracy = accuracy;
    r.test_loss = loss;
    // A peer that did not answer has no score (null in the line).
    for (std::size_t p = 0; p < n; ++p) {
      if (!answered[p]) r.peer_test_accuracy[p] = r.peer_test_loss[p] = std::nan("");
    }
  } else {
    r.peer_test_accuracy.clear();
    r.peer_test_loss.clear();
  }
  return r;
}

void ConsensusPoll::score(std::span<const float> x, double& accuracy, double& loss) {
  std::copy(x.begin(), x.end(), scorer_.params().begin());
  const std::size_t cols = eval_.cols;
  const auto ev = scorer_.evaluate(
      std::span<const float>(eval_.features).first(eval_rows_ * cols),
      std::span<const std::int32_t>(eval_.labels).first(eval_rows_), ws_);
  accuracy = accuracy_of(ev);
  loss = loss_of(ev);
}

}  // namespace dpg::train
