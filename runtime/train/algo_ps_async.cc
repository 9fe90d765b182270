// An asynchronous parameter server with bounded staleness (stale-synchronous parallel, Ho et al.
// 2013). Ranks 0..K-1 each hold a contiguous shard of the parameters; every rank is also a
// worker. A worker pushes each server its released gradient's shard and pulls the updated shard
// back; a server applies each gradient as it arrives, with its own SGD state, without waiting
// for the other workers. Every worker noises with the full sigma (Release::own).
// Messages: a collective::Service under op kOpPsPush whose op k is a push to server k (sizes
// fixed by its shard's): the request is the gradient's shard, round = the worker's step; the
// reply is its staleness (8 bytes) and the updated shard. A server's responders (one per remote
// worker) and its main thread (its own worker's pushes) share the shard and clocks under mu_.
// Staleness. A worker's clock is the number of its pushes a server has applied; the shard's
// version is the slowest worker's clock. The reply to step t (clock t + 1) is held until
// t + 1 - version <= max_staleness, so no worker runs more than max_staleness steps ahead of
// the slowest, and the slowest never waits. The staleness of an applied gradient is the version
// at apply minus that of the reply it was computed from; the rule bounds it by max_staleness (0:
// every gradient is fresh, as in synchronous SGD). Counting single updates would scale with N.
// Blame: a hold ends at the service's first failure, which the slowest worker's responder finds
// through the transport's liveness; after twice the timeout it names the slowest worker.
// Evaluations: release() and save() drain the service first (a reply must not queue behind a
// collective's large message). docs/PARAMETER_SERVER.md says why, in full.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <optional>
#include <sstream>
#include <utility>

#include "runtime/collective/service.h"
#include "runtime/core/error.h"
#include "runtime/train/algorithms.h"
#include "runtime/train/ps.h"

namespace dpg::train {
namespace {

constexpr std::size_t kHead = sizeof(std::uint64_t) / sizeof(float);  // a reply's staleness
constexpr std::size_t kHeadBytes = kHead * sizeof(float);
std::size_t ix(long long i) { return static_cast<std::size_t>(i); }
template <class... A> std::string text(const A&... a) {
  std::ostringstream s;
  (s << ... << a);
  return s.str();
}

struct Staleness {
  double sum = 0;
  long long count = 0, max = 0;
  void add(long long s) { sum += static_cast<double>(s), ++count, max = std::max(max, s); }
};

class PsAsync final : public Algorithm {
 public:
  explicit PsAsync(const AlgoSetup& s)
      : config_(s.config),
        comm_(*s.comm),
        mechanism_(s.mechanism),
        n_(s.num_params),
        servers_(ps_servers(s.config.servers, s.comm->world())),
        rank_(s.comm->rank()),
        world_(s.comm->world()),
        steps_(s.plan.steps),
        peer_sigma_(s.config.dp ? s.plan.peer_sigma : 0.0) {
    std::vector<collective::ServiceOp> ops;  // op k: a push to server k
    for (int p = 0; p < world_; ++p) {
      if (p != rank_) workers_.push_back(p);
      if (p != rank_ && p < servers_) others_.push_back(p);
      if (p >= servers_) continue;
      const auto [b, e] = range(p);
      reply_.emplace_back(kHead + e - b);
      ops.push_back({(e - b) * sizeof(float), (kHead + e - b) * sizeof(float)});
    }
    service_.emplace(s.comm->transport(), kOpPsPush, "ps-async", ops, s.tracer);
    if (!is_server()) return;
    begin_ = range(rank_).first;
    shard_.resize(range(rank_).second - begin_);
    sgd_.emplace(shard_.size(), SgdOptions{s.config.lr, s.config.momentum, s.config.weight_decay});
    clock_ = last_version_ = std::vector<long long>(ix(world_), 0);
  }

  ~PsAsync() override { stopping_ = true; }  // a held reply gives up; service_ then stops

  void before_gradient(long long t, std::span<const float> params) override {
    service_->rethrow();
    if (!is_server() || service_->serving()) return;
    // The shard starts from rank 0's model (broadcast by the trainer), unless restored.
    if (!restored_) std::copy_n(params.subspan(begin_).begin(), shard_.size(), shard_.begin());
    using Reply = collective::Service::Reply;
    service_->serve(workers_, ix(t), [this](const auto& r, Wire<const std::byte> in, Reply& out) {
      if (r.op != ix(rank_)) service_->fail(r.peer, Code::data_loss, text(pre(), "bad op ", r.op));
      const auto g = dp::PrivateGradient::from_peer(in.as<float>(), peer_sigma_);
      const std::uint64_t s = serve(r.peer, static_cast<long long>(r.round), g,
                                    [&](Wire<const float> shard) { out.put(kHeadBytes, shard.bytes()); });
      out.put(0, public_value(std::span<const std::uint64_t>(&s, 1)).bytes());
    });
  }

  // The staleness tallies, and a server's state at boundary t (its steps before t answered).
  void save(long long t, Checkpoint& out) override {
    out.put("algo/staleness", std::span<const Staleness>(tally_));
    Json& a = out.meta["algo"];
    a["server_state"] = is_server() && (service_->serving() || restored_);  // else in the model
    if (!a["server_state"]) return;
    if (service_->serving()) service_->drain(ix(t));
    std::lock_guard lock(mu_);
    a["server_started"] = sgd_->started();
    out.put("algo/shard", std::span<const float>(shard_));
    out.put("algo/server_momentum", sgd_->momentum_buffer());
    out.put("algo/last_version", std::span<const long long>(last_version_));
  }

  void restore(long long t, const Checkpoint& in) override {
    in.get("algo/staleness", std::span<Staleness>(tally_));
    JsonReader a(in.meta.at("algo"), in.where + ": /algo");
    steps_done_ = t;
    service_->number_from(ix(t));  // the servers serve from step t
    if (!is_server() || !a.boolean("server_state")) return;
    std::lock_guard lock(mu_);
    std::vector<float> velocity(sgd_->momentum_buffer().size());
    in.get("algo/server_momentum", std::span<float>(velocity));
    sgd_->restore(velocity, a.boolean("server_started"));
    in.get("algo/shard", std::span<float>(shard_));
    in.get("algo/last_version", std::span<long long>(last_version_));
    clock_.assign(ix(world_), t);  // every worker pushed steps 0..t-1
    restored_ = true;
  }

  void apply(long long t, const dp::PrivateGradient& mine, std::span<float> params, Sgd&) override {
    params_ = params.data();
    // Only the released gradient (its noise already added by the mechanism) leaves here.
    std::vector<int> tickets;
    mechanism_.exchange(mine, [&](Wire<const float> released) {
      for (int k : others_) {
        const auto g = released.subspan(range(k).first, range(k).second - range(k).first);
        tickets.push_back(service_->call(k, static_cast<std::uint32_t>(k), ix(t), g.bytes(),
                                         std::as_writable_bytes(std::span(reply_[ix(k)]))));
      }
    });
    const std::size_t n = shard_.size();
    if (is_server()) {
      note(serve(rank_, t, mine.part(begin_, n), [&](Wire<const float> shard) {
        std::copy(shard.values().begin(), shard.values().end(), params.subspan(begin_).begin());
      }));
    }
    for (std::size_t i = 0; i < tickets.size(); ++i) {
      const int k = others_[i];
      const auto& in = reply_[ix(k)];
      service_->wait(tickets[i]);
      std::uint64_t staleness;
      std::memcpy(&staleness, in.data(), sizeof staleness);
      std::copy(in.begin() + kHead, in.end(), params.subspan(range(k).first).begin());
      note(staleness);
    }
    steps_done_ = t + 1;
  }

  void finish(std::span<float>) override {
    service_->finish(others_);
    if (is_server()) service_->join();  // each responder exits at its worker's done
  }

  void release(std::span<const float> mine, std::span<float> out) override {
    if (service_->serving()) service_->drain(ix(steps_done_));  // first (top); no push in flight
    service_->rethrow();
    if (mine.data() != params_) return mean_over_peers(comm_, mine, out);  // an average
    for (int k = 0; k < servers_; ++k) {
      const auto [b, e] = range(k);
      if (k == rank_) std::copy(shard_.begin(), shard_.end(), out.subspan(b).begin());
      comm_.broadcast(public_model(out.subspan(b, e - b)).bytes(), k);
    }
  }

  void annotate(Json& line, long long, bool summary) const override {
    // An epoch's line: the steps since the previous line; the summary: the whole run's.
    const Staleness s = summary ? tally_[1] : std::exchange(tally_[0], Staleness{});
    line["staleness_mean"] = s.count > 0 ? s.sum / static_cast<double>(s.count) : 0.0;
    line["staleness_max"] = s.max;
    line["servers"] = servers_;
    line["max_staleness"] = config_.max_staleness;
  }

 private:
  bool is_server() const { return rank_ < servers_; }
  std::string pre() const { return rank_prefix(rank_) + "ps-async: "; }
  decltype(shard_range(0, 1, 0)) range(int k) const { return shard_range(n_, servers_, k); }
  void note(std::uint64_t s) { for (auto& x : tally_) x.add(static_cast<long long>(s)); }
  long long slowest() const { return *std::min_element(clock_.begin(), clock_.end()); }

  // Applies worker w's step-t gradient shard, holds the reply while w is more than
  // max_staleness steps ahead of the slowest worker, hands the shard to `emit` (under the lock)
  // and returns the gradient's staleness. Gives up by failing the service (top: Blame).
  std::uint64_t serve(int w, long long t, const dp::PrivateGradient& g,
                      const std::function<void(Wire<const float>)>& emit) {
    std::unique_lock lock(mu_);
    if (clock_[ix(w)] != t)
      service_->fail(w, Code::data_loss, text(pre(), "worker ", w, " step ", t, " out of order"));
    const auto staleness = static_cast<std::uint64_t>(slowest() - last_version_[ix(w)]);
    // Each push carries one worker's batch, 1/N of what a synchronous step sums, so it moves the
    // shard 1/N as far: a round of N pushes takes the synchronous step's size, with the same
    // momentum's steady-state gain lr / (1 - momentum).
    sgd_->set_lr(scheduled_lr(config_, t, steps_) / static_cast<double>(world_));
    sgd_->apply(shard_, g);
    clock_[ix(w)] = t + 1;
    cv_.notify_all();
    const auto deadline = std::chrono::steady_clock::now() + 2 * comm_.transport().timeout();
    while (t + 1 - slowest() > config_.max_staleness) {
      // The first failure names its culprit (fail() keeps it); going down names this rank.
      if (stopping_ || service_->failed()) {
        service_->fail(rank_, Code::aborted, text(pre(), "server stopped (peer ", rank_,
                                                 " failed) holding worker ", w, "'s step ", t));
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        // The slowest worker: its clocks cannot tell which of several at the slowest step
        // stopped, so it names them all ("peer 1 or peer 3") and blames the first.
        std::string peers;
        int who = 0;
        for (int p = world_ - 1; p >= 0; --p) {
          if (clock_[ix(p)] == slowest())
            peers = text("peer ", who = p, peers.empty() ? "" : " or ", peers);
        }
        service_->fail(
            who, Code::deadline_exceeded,
            text(pre(), "server held worker ", w, "'s step ", t, " waiting for ", peers,
                 " (at step ", slowest(), ") to come within max_staleness ", config_.max_staleness,
                 ": ", peers, " stopped, hung or is slower than the timeout allows"));
      }
      cv_.wait_for(lock, std::chrono::milliseconds(50));  // a failure is polled, not signalled
    }
    last_version_[ix(w)] = slowest();
    emit(public_model(std::span<const float>(shard_)));  // the optimiser's, from released gradients
    return staleness;
  }

  const TrainConfig& config_;
  collective::Communicator& comm_;
  dp::GaussianMechanism& mechanism_;
  std::size_t n_;  // parameters
  int servers_, rank_, world_;
  long long steps_;
  double peer_sigma_;                  // the noise every worker's push carries
  std::vector<int> workers_, others_;  // every other rank; the servers among them
  // The worker's side (the training thread).
  std::vector<std::vector<float>> reply_;   // per server: staleness + shard
  mutable std::array<Staleness, 2> tally_;  // of this worker's gradients: since the last line, run
  long long steps_done_ = 0;
  const float* params_ = nullptr;  // the worker's iterate, to tell it from an average
  // The server's side (ranks below servers_), under mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t begin_ = 0;
  std::vector<float> shard_;
  std::optional<Sgd> sgd_;
  std::vector<long long> clock_;         // per worker: pushes applied
  std::vector<long long> last_version_;  // per worker: the version of its last reply
  bool restored_ = false;              // the shard and clocks came from a checkpoint
  std::atomic<bool> stopping_{false};  // this rank is going down
  std::optional<collective::Service> service_;  // last: its responders stop before what they use
};

}  // namespace

std::unique_ptr<Algorithm> make_ps_async(const AlgoSetup& s) {
  return std::make_unique<PsAsync>(s);
}

}  // namespace dpg::train
