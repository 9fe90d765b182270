// An asynchronous parameter server with bounded staleness (stale-synchronous parallel, Ho et al.
// 2013). Ranks 0..K-1 each hold a contiguous shard of the parameters; every rank is also a
// worker. A worker pushes each server its released gradient's shard and pulls the updated shard
// back; a server applies each gradient as it arrives, with its own SGD state, without waiting
// for the other workers. Every worker noises with the full sigma (Release::own).
//
// Threads. A server rank runs one thread per remote worker, blocked in wait() for that worker's
// next push (the transport has no receive-from-any, and a thread per worker keeps each pair's
// messages in order without polling); its own worker's pushes are served by the main thread.
// The shard, its optimiser and the clocks sit under one mutex.
//
// Messages (sizes fixed by public facts, never read from a peer):
//   push  worker -> server, op kOpPsPush, round = the worker's step: PushHeader + shard floats
//         (kind done, round = the step count, at finish(): the server thread exits);
//   reply server -> worker, op kOpPsPull, round = the step: ReplyHeader + shard floats.
//
// Staleness. A worker's clock is the number of its pushes a server has applied; the shard's
// version is the slowest worker's clock. The reply to step t (clock t + 1) is held until
// t + 1 - version <= max_staleness, so no worker runs more than max_staleness steps ahead of
// the slowest, and the slowest never waits. The staleness of an applied gradient is the version
// at apply minus the version of the reply it was computed from; the rule bounds it by
// max_staleness (0: every gradient is fresh, as in synchronous SGD). Counting single updates
// instead would scale with the number of workers.
//
// Evaluations. Every rank's main thread runs the evaluation collectives over its Communicator
// (ops 1-3) while the server threads use ops 5 and 6 only. Since a transport reads each peer's
// messages in order, a server's reply must not queue behind a collective message its worker is
// not ready to receive: at release() a server rank first waits until it has replied to every
// worker's every step so far. Evaluations are at the same step on every peer, so this is a
// barrier once per epoch. The released model is the servers' parameters, broadcast shard by
// shard from each server at that barrier (no update is in flight then): every peer evaluates
// the same model, the one the servers hold, so replicas_differ() is false. An average of the
// iterates (ema) is each worker's own, so it is released as the mean over the workers.
//
// Thread safety of the transports: OpTable::post allocates under a mutex and wait() without a
// driver sleeps on a condition variable per table, so several threads may post and wait at once.
// InprocTransport matches messages under the fabric's mutex; TcpTransport with
// TcpOptions::progress_thread (which AlgoInfo::overlaps turns on) hands each send and receive to
// the I/O thread with asio::post and never drives I/O from the waiting thread. Without the
// progress thread TCP would drive I/O from every waiter at once, which is not safe.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "runtime/core/error.h"
#include "runtime/train/algorithms.h"
#include "runtime/train/ps.h"

namespace dpg::train {
namespace {

using Clock = std::chrono::steady_clock;

struct PushHeader {
  std::uint64_t kind;  // kGradient or kDone
  std::uint64_t step;
  std::uint64_t pad[2];
};
struct ReplyHeader {
  std::uint64_t step;
  std::uint64_t version;    // the shard's version (slowest clock) the floats are at
  std::uint64_t staleness;  // of the gradient this replies to (stalled: the slowest's step)
  std::uint64_t stalled;    // 0, or 1 + the slowest worker when the server gave up holding
};
static_assert(sizeof(PushHeader) == 32 && sizeof(ReplyHeader) == 32);
constexpr std::uint64_t kGradient = 0, kDone = 1;
constexpr std::size_t kHeaderFloats = 32 / sizeof(float);

struct Staleness {
  double sum = 0;
  long long count = 0, max = 0;
  void add(long long s) {
    sum += static_cast<double>(s);
    ++count;
    max = std::max(max, s);
  }
};

class PsAsync final : public Algorithm {
 public:
  explicit PsAsync(const AlgoSetup& s)
      : config_(s.config),
        comm_(*s.comm),
        transport_(s.comm->transport()),
        num_params_(s.num_params),
        servers_(ps_servers(s.config.servers, s.comm->world())),
        rank_(s.comm->rank()),
        world_(s.comm->world()),
        steps_(s.plan.steps),
        peer_sigma_(s.config.dp ? s.plan.peer_sigma : 0.0),
        per_step_(static_cast<std::size_t>(s.plan.steps)),
        tracer_(s.tracer) {
    // A worker's buffers: one message per server, header then shard.
    for (int k = 0; k < servers_; ++k) {
      const auto [b, e] = shard_range(num_params_, servers_, k);
      push_.emplace_back(kHeaderFloats + (e - b));
      reply_.emplace_back(kHeaderFloats + (e - b));
    }
    if (is_server()) {
      const auto [b, e] = shard_range(num_params_, servers_, rank_);
      begin_ = b;
      shard_.resize(e - b);
      sgd_.emplace(e - b, SgdOptions{.lr = s.config.lr,
                                     .momentum = s.config.momentum,
                                     .weight_decay = s.config.weight_decay});
      clock_.assign(static_cast<std::size_t>(world_), 0);
      replied_.assign(static_cast<std::size_t>(world_), 0);
      last_version_.assign(static_cast<std::size_t>(world_), 0);
    }
  }

  ~PsAsync() override {
    // Bounded: a thread blocked in the transport returns by its timeout (or at once when the
    // transport is poisoned); one holding a reply sees `stopping_`.
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  void before_gradient(long long t, std::span<const float> params) override {
    if (is_server() && !started_) {
      // Every peer starts from rank 0's model (the trainer broadcasts it): the shard is ours,
      // unless it came from a checkpoint.
      if (!restored_) {
        std::copy_n(params.begin() + static_cast<std::ptrdiff_t>(begin_), shard_.size(),
                    shard_.begin());
      }
      started_ = true;
      for (int w = 0; w < world_; ++w) {
        if (w != rank_) threads_.emplace_back([this, w, t] { serve_worker(w, t); });
      }
    }
    rethrow_server_failure();
  }

  // A server waits until every worker's pushes before step t are applied and answered: then no
  // reply is in flight, and the shard, its optimiser and the clocks are those of the boundary
  // (each worker is blocked at it until the trainer's collectives there are done).
  void quiesce(long long t) override {
    rethrow_server_failure();
    if (is_server() && started_) wait_replied(t);
  }

  void save(long long t, Checkpoint& out) override {
    out.put("algo/staleness", std::span<const Staleness>(per_step_).first(static_cast<std::size_t>(t)));
    Json& a = out.meta["algo"];
    a["annotated"] = annotated_;
    // Before the first step the shard is still to be taken from the model.
    a["server_state"] = is_server() && (started_ || restored_);
    if (!a["server_state"]) return;
    std::lock_guard lock(mu_);
    a["updates"] = updates_;
    a["server_started"] = sgd_->started();
    out.put("algo/shard", std::span<const float>(shard_));
    out.put("algo/server_momentum", sgd_->momentum_buffer());
    out.put("algo/last_version", std::span<const long long>(last_version_));
  }

  void restore(long long t, const Checkpoint& in) override {
    in.get("algo/staleness", std::span<Staleness>(per_step_).first(static_cast<std::size_t>(t)));
    JsonReader a(in.meta.at("algo"), in.where + ": /algo");
    annotated_ = a.integer("annotated");
    steps_done_ = t;
    if (!is_server() || !a.boolean("server_state")) return;
    std::lock_guard lock(mu_);
    updates_ = a.integer("updates");
    std::vector<float> velocity(sgd_->momentum_buffer().size());
    in.get("algo/server_momentum", std::span<float>(velocity));
    sgd_->restore(velocity, a.boolean("server_started"));
    in.get("algo/shard", std::span<float>(shard_));
    in.get("algo/last_version", std::span<long long>(last_version_));
    // At the boundary every worker had pushed, and been answered for, steps 0..t-1.
    clock_.assign(static_cast<std::size_t>(world_), t);
    replied_.assign(static_cast<std::size_t>(world_), t);
    restored_ = true;
  }

  void apply(long long t, const dp::PrivateGradient& mine, std::span<float> params,
             Sgd&) override {
    rethrow_server_failure();
    params_ = params.data();
    const auto round = static_cast<std::uint64_t>(t);
    const std::span<const float> g = mine.values();
    std::vector<net::Handle> sends, pulls;
    for (int k = 0; k < servers_; ++k) {
      if (k == rank_) continue;
      const auto [b, e] = shard_range(num_params_, servers_, k);
      auto& msg = push_[static_cast<std::size_t>(k)];
      const PushHeader h{kGradient, round, {0, 0}};
      std::memcpy(msg.data(), &h, sizeof h);
      // Only the released gradient (its noise already added by the mechanism) leaves here.
      std::copy(g.begin() + static_cast<std::ptrdiff_t>(b), g.begin() + static_cast<std::ptrdiff_t>(e),
                msg.begin() + kHeaderFloats);
      auto& in = reply_[static_cast<std::size_t>(k)];
      pulls.push_back(transport_.recv(k, {kOpPsPull, round, 0}, std::as_writable_bytes(std::span(in))));
      sends.push_back(transport_.send(k, {kOpPsPush, round, 0}, std::as_bytes(std::span(msg))));
    }
    Staleness& st = per_step_[static_cast<std::size_t>(t)];
    if (is_server()) {
      const auto r = serve(rank_, t, mine.part(begin_, shard_.size()),
                           params.subspan(begin_, shard_.size()));
      st.add(static_cast<long long>(r.staleness));
    }
    std::size_t i = 0;
    for (int k = 0; k < servers_; ++k) {
      if (k == rank_) continue;
      try {
        transport_.wait(pulls[i++]);
      } catch (const Error&) {
        // Server k's link failed: a reply this rank's server holds names k, not this rank.
        std::lock_guard lock(mu_);
        if (blame_ < 0) blame_ = k;
        throw;
      }
      const auto [b, e] = shard_range(num_params_, servers_, k);
      const auto& in = reply_[static_cast<std::size_t>(k)];
      ReplyHeader h;
      std::memcpy(&h, in.data(), sizeof h);
      if (h.stalled != 0 && h.stalled <= static_cast<std::uint64_t>(world_) && h.step == round) {
        const int who = static_cast<int>(h.stalled - 1);
        {
          // Should this rank's server hold replies when it goes down, it names the same peer.
          std::lock_guard lock(mu_);
          blame_ = who;
        }
        if (who == k) {
          fail(Code::aborted, "rank " + std::to_string(rank_) + ": server " + std::to_string(k) +
                                  " (peer " + std::to_string(k) + ") failed while holding step " +
                                  std::to_string(t) + "'s reply");
        }
        fail(Code::deadline_exceeded,
             "rank " + std::to_string(rank_) + ": server " + std::to_string(k) + " held step " +
                 std::to_string(t) + " past half the timeout waiting for peer " +
                 std::to_string(who) + " (at step " + std::to_string(h.staleness) +
                 ") to come within max_staleness " + std::to_string(config_.max_staleness) +
                 ": peer " + std::to_string(who) + " stopped, hung or is too slow");
      }
      if (h.step != round || h.stalled != 0 || h.staleness > static_cast<std::uint64_t>(steps_)) {
        fail(Code::data_loss, "rank " + std::to_string(rank_) + ": ps-async reply from server " +
                                  std::to_string(k) + " for step " + std::to_string(t) +
                                  " is malformed (step " + std::to_string(h.step) + ")");
      }
      std::copy(in.begin() + kHeaderFloats, in.end(), params.begin() + static_cast<std::ptrdiff_t>(b));
      st.add(static_cast<long long>(h.staleness));
    }
    for (auto h : sends) transport_.wait(h);
    steps_done_ = t + 1;
  }

  void finish(std::span<float>) override {
    rethrow_server_failure();
    std::vector<net::Handle> sends;
    for (int k = 0; k < servers_; ++k) {
      if (k == rank_) continue;
      auto& msg = push_[static_cast<std::size_t>(k)];
      std::fill(msg.begin(), msg.end(), 0.0f);
      const PushHeader h{kDone, static_cast<std::uint64_t>(steps_done_), {0, 0}};
      std::memcpy(msg.data(), &h, sizeof h);
      sends.push_back(transport_.send(k, {kOpPsPush, h.step, 0}, std::as_bytes(std::span(msg))));
    }
    for (auto h : sends) transport_.wait(h);
    // Each thread exits at its worker's done (or by the transport's timeout when it never comes).
    for (auto& t : threads_) t.join();
    threads_.clear();
    rethrow_server_failure();
  }

  void release(std::span<const float> mine, std::span<float> out) override {
    rethrow_server_failure();
    if (is_server()) wait_replied(steps_done_);
    if (mine.data() != params_) {
      mean_over_peers(comm_, mine, out);  // each worker's average of its iterates
      return;
    }
    for (int k = 0; k < servers_; ++k) {
      const auto [b, e] = shard_range(num_params_, servers_, k);
      if (k == rank_) {
        std::lock_guard lock(mu_);
        std::copy(shard_.begin(), shard_.end(), out.begin() + static_cast<std::ptrdiff_t>(b));
      }
      comm_.broadcast(public_model(out.subspan(b, e - b)).bytes(), k);
    }
  }

  void annotate(Json& line, long long t, bool summary) const override {
    // The epoch's steps: those after the previous line's (the whole run for the summary).
    const long long from = summary ? 0 : std::min(annotated_, t);
    Staleness total;
    for (long long s = from; s < std::min(t, steps_); ++s) {
      const auto& x = per_step_[static_cast<std::size_t>(s)];
      total.sum += x.sum;
      total.count += x.count;
      total.max = std::max(total.max, x.max);
    }
    if (!summary) annotated_ = t;
    line["staleness_mean"] = total.count > 0 ? total.sum / static_cast<double>(total.count) : 0.0;
    line["staleness_max"] = total.max;
    line["servers"] = servers_;
    line["max_staleness"] = config_.max_staleness;
  }

 private:
  struct Served {
    std::uint64_t version, staleness;
    std::uint64_t stalled;  // 1 + the slowest worker when the hold timed out
    std::string why;
  };

  bool is_server() const { return rank_ < servers_; }

  long long slowest(int* who) const {
    const auto it = std::min_element(clock_.begin(), clock_.end());
    if (who) *who = static_cast<int>(it - clock_.begin());
    return *it;
  }

  // Every worker at the slowest clock, "peer 1" or "peer 1 or peer 3": from its clocks alone a
  // server cannot tell which of several workers at the same step stopped and which it took down.
  std::string slowest_peers() const {
    const long long low = slowest(nullptr);
    std::string out;
    for (int w = 0; w < world_; ++w) {
      if (clock_[static_cast<std::size_t>(w)] != low) continue;
      out += (out.empty() ? "peer " : " or peer ") + std::to_string(w);
    }
    return out;
  }

  // Applies worker w's step-t gradient shard, holds the reply while w is more than
  // max_staleness steps ahead of the slowest worker, and writes the shard into `out`.
  Served serve(int w, long long t, const dp::PrivateGradient& g, std::span<float> out) {
    std::unique_lock lock(mu_);
    const auto wi = static_cast<std::size_t>(w);
    if (clock_[wi] != t) {
      fail(Code::data_loss, "rank " + std::to_string(rank_) + ": ps-async push of step " +
                                std::to_string(t) + " from worker " + std::to_string(w) +
                                " out of order (expected step " + std::to_string(clock_[wi]) +
                                ")");
    }
    const long long version = slowest(nullptr);
    const auto staleness = static_cast<std::uint64_t>(version - last_version_[wi]);
    // Each push carries one worker's batch, 1/N of what a synchronous step sums, so it moves the
    // shard 1/N as far: a round of N pushes takes the synchronous step's size, with the same
    // momentum's steady-state gain lr / (1 - momentum).
    sgd_->set_lr(scheduled_lr(config_, t, steps_) / static_cast<double>(world_));
    sgd_->apply(shard_, g);
    ++updates_;
    clock_[wi] = t + 1;
    cv_.notify_all();
    // Half the timeout, so that the held worker's wait for the reply has not expired yet.
    const auto hold = transport_.timeout() / 2;
    const auto deadline = Clock::now() + hold;
    int who = 0;
    while (t + 1 - slowest(&who) > config_.max_staleness) {
      // Given up on (past the hold, or this rank is stopping): the culprit is the slowest
      // worker, not this server, so say so to the held worker in the reply before its own wait
      // on us expires; fail here naming it too.
      const bool give_up = stopping_ || failed_ ||
                           (cv_.wait_until(lock, deadline) == std::cv_status::timeout &&
                            t + 1 - slowest(&who) > config_.max_staleness);
      if (!give_up) continue;
      // A server thread of this rank failed first (a peer's connection lost, its abort read):
      // for this rank's own worker that failure names the cause, where the slowest clock here
      // may only be a peer it took down. A remote worker still gets the held reply below.
      if (failed_ && !stopping_ && w == rank_) {
        blame_ = failed_peer_;
        throw Error(failure_code_, failure_);
      }
      // This peer is going down: the culprit is whom its own worker gave up on, else the peer
      // whose server thread failed first, else itself.
      if (stopping_) who = blame_ >= 0 ? blame_ : failed_ ? failed_peer_ : rank_;
      const std::string waited_for = stopping_ ? "peer " + std::to_string(who) : slowest_peers();
      const std::string why = who == rank_
          ? "rank " + std::to_string(rank_) + ": ps-async server stopped (peer " +
                std::to_string(rank_) + " failed) while holding worker " + std::to_string(w) +
                "'s step " + std::to_string(t)
          :
          "rank " + std::to_string(rank_) + ": ps-async server held worker " + std::to_string(w) +
          "'s step " + std::to_string(t) + " waiting for " + waited_for + " (at step " +
          std::to_string(clock_[static_cast<std::size_t>(who)]) +
          ") to come within max_staleness " + std::to_string(config_.max_staleness) + ": " +
          waited_for + " stopped, hung or is slower than the timeout allows";
      if (w == rank_) {
        blame_ = who;
        fail(Code::deadline_exceeded, why);
      }
      std::copy(shard_.begin(), shard_.end(), out.begin());
      return {0, static_cast<std::uint64_t>(clock_[static_cast<std::size_t>(who)]),
              static_cast<std::uint64_t>(who) + 1, why};
    }
    const long long now = slowest(nullptr);
    last_version_[wi] = now;
    std::copy(shard_.begin(), shard_.end(), out.begin());
    return {static_cast<std::uint64_t>(now), staleness, 0, {}};
  }

  // A server thread: worker w's pushes, one step at a time from step `first`, until its done.
  void serve_worker(int w, long long first) {
    if (tracer_) tracer_->name_thread("server");
    const auto [b, e] = shard_range(num_params_, servers_, rank_);
    std::vector<float> in(kHeaderFloats + (e - b)), out(kHeaderFloats + (e - b));
    int culprit = w;  // whom a failure here blames: w's link, unless a held reply named another
    try {
      for (long long t = first;; ++t) {
        const auto round = static_cast<std::uint64_t>(t);
        transport_.wait(
            transport_.recv(w, {kOpPsPush, round, 0}, std::as_writable_bytes(std::span(in))));
        PushHeader h;
        std::memcpy(&h, in.data(), sizeof h);
        if (h.step != round || (h.kind != kGradient && h.kind != kDone)) {
          fail(Code::data_loss, "malformed push (kind " + std::to_string(h.kind) + ", step " +
                                    std::to_string(h.step) + ") for step " + std::to_string(t));
        }
        if (h.kind == kDone) {
          std::lock_guard lock(mu_);
          clock_[static_cast<std::size_t>(w)] = std::numeric_limits<long long>::max() / 2;
          replied_[static_cast<std::size_t>(w)] = std::numeric_limits<long long>::max() / 2;
          cv_.notify_all();
          return;
        }
        const auto g = dp::PrivateGradient::from_peer(
            std::span<const float>(in).subspan(kHeaderFloats), peer_sigma_);
        const Served r = serve(w, t, g, std::span(out).subspan(kHeaderFloats));
        const ReplyHeader rh{round, r.version, r.staleness, r.stalled};
        std::memcpy(out.data(), &rh, sizeof rh);
        transport_.wait(
            transport_.send(w, {kOpPsPull, round, 0}, std::as_bytes(std::span(out))));
        if (r.stalled != 0) {
          culprit = static_cast<int>(r.stalled) - 1;  // the peer the held reply named
          fail(Code::deadline_exceeded, r.why);
        }
        {
          // Counted once sent, not once posted: release() relies on every reply being on its
          // way before this rank's collectives, which share the stream to the worker.
          std::lock_guard lock(mu_);
          replied_[static_cast<std::size_t>(w)] = t + 1;
        }
        cv_.notify_all();
      }
    } catch (const std::exception& ex) {
      std::lock_guard lock(mu_);
      if (!failed_) {
        failed_ = true;
        failed_peer_ = culprit;
        const auto* err = dynamic_cast<const Error*>(&ex);
        failure_code_ = err ? err->code() : Code::internal;
        const std::string prefix = "rank " + std::to_string(rank_) + ": ";
        std::string what = ex.what();
        if (what.rfind(prefix, 0) == 0) what.erase(0, prefix.size());  // say "rank R:" once
        failure_ = prefix + "ps-async server thread for worker (peer) " + std::to_string(w) +
                   " failed: " + what;
      }
      cv_.notify_all();
    }
  }

  // Waits (bounded) until every worker's first `steps` pushes have been replied to.
  void wait_replied(long long steps) {
    std::unique_lock lock(mu_);
    const auto deadline = Clock::now() + 2 * transport_.timeout();
    auto done = [&] {
      if (failed_) return true;
      for (int w = 0; w < world_; ++w) {
        if (w != rank_ && replied_[static_cast<std::size_t>(w)] < steps) return false;
      }
      return true;
    };
    if (!cv_.wait_until(lock, deadline, done)) {
      int who = 0;
      for (int w = 0; w < world_; ++w) {
        if (w != rank_ && replied_[static_cast<std::size_t>(w)] < steps) who = w;
      }
      fail(Code::deadline_exceeded,
           "rank " + std::to_string(rank_) + ": ps-async server waited for peer " +
               std::to_string(who) + "'s step " + std::to_string(steps - 1) + " (it is at step " +
               std::to_string(replied_[static_cast<std::size_t>(who)]) + ") past the timeout");
    }
    lock.unlock();
    rethrow_server_failure();
  }

  void rethrow_server_failure() {
    std::lock_guard lock(mu_);
    if (failed_) throw Error(failure_code_, failure_);
  }

  const TrainConfig& config_;
  collective::Communicator& comm_;
  net::Transport& transport_;
  std::size_t num_params_;
  int servers_, rank_, world_;
  long long steps_;
  double peer_sigma_;  // the noise every worker's push carries
  // The worker's side.
  std::vector<std::vector<float>> push_, reply_;  // per server: header + shard
  std::vector<Staleness> per_step_;               // of this worker's gradients, per step
  mutable long long annotated_ = 0;
  long long steps_done_ = 0;
  const float* params_ = nullptr;  // the worker's iterate, to tell it from an average
  // The server's side (ranks below servers_), under mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t begin_ = 0;
  std::vector<float> shard_;
  std::optional<Sgd> sgd_;
  std::vector<long long> clock_;         // per worker: pushes applied
  std::vector<long long> replied_;       // per worker: replies sent
  std::vector<long long> last_version_;  // per worker: the version of its last reply
  long long updates_ = 0;
  int blame_ = -1;  // the peer this rank's own worker gave up waiting for
  int failed_peer_ = -1;  // whom the first failed server thread blamed (its worker's link, or the
                         // peer its held reply named)
  bool started_ = false, stopping_ = false, failed_ = false;
  bool restored_ = false;  // the shard and clocks came from a checkpoint
  Code failure_code_ = Code::internal;
  std::string failure_;
  trace::Tracer* tracer_;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<Algorithm> make_ps_async(const AlgoSetup& s) {
  return std::make_unique<PsAsync>(s);
}

}  // namespace dpg::train
