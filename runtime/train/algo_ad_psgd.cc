// AD-PSGD (Lian et al., ICML 2018): asynchronous decentralized SGD. A peer averages its model
// with one neighbour at a time while the others keep computing, and a slow peer stalls nobody.
//
// Pairing without deadlock: the graph (the first and only phase of `topology`) must be bipartite.
// Every peer 2-colours it the same way (BFS from rank 0, lowest rank first): colour 0 is active,
// colour 1 passive. Active peers initiate, passive peers only answer, so no two requests can wait
// on each other.
//
//   active i, step t:  gradient g at x_i; pick one passive neighbour j (own RNG, seeded by
//                      config.seed and rank); send x_i to j, receive x_j' from j;
//                      x_i <- (x_i + x_j') / 2; then x_i <- SGD(x_i, g).
//   passive j:         one responder thread per active neighbour answers each request at once,
//                      without waiting for j's own computation: under a short mutex it replies
//                      x_j' = x_j + pending (the model as it will be once the deltas taken so far
//                      are added) and records pending += (x_i - x_j') / 2. j's training thread adds
//                      the pending deltas to its params in apply() (under the same mutex) before
//                      its own SGD step.
// So an averaging moves i by (x_j' - x_i) / 2 and j by (x_i - x_j') / 2: the pair's sum, and with
// lr 0 the mean over all peers, is kept exactly (up to float rounding). Each peer adds the full
// noise to its own gradient (Release::own): its model is all it sends.
//
// Messages (op kOpAdPsgd; round = a per-pair counter both sides keep, one per active step):
//   i -> j  chunk 0                 Header (16 bytes): kind idle / exchange / done, magic, step
//   i -> j  chunks 1 .. m           exchange only: x_i, cut in pieces of kChunkFloats floats
//   j -> i  chunks kReply + 0 .. m-1  exchange only: the reply x_j'
// Every size is fixed by the model's, so nothing is allocated from a length a peer sent.
//
// Deadlines: every wait has the transport's timeout, measured from when it was posted. An active
// peer sends a header to EVERY passive neighbour at every step (idle to all but the one it pairs
// with, 16 bytes each), so a responder's wait for the next request spans one step of its active
// neighbour, not the random gap until it is picked again (about d steps on average with degree d,
// but unbounded). A stall of an active peer past the timeout (or its death) therefore makes its
// passive neighbours fail naming it; a dead passive peer stops answering and its active neighbours
// time out on it. Evaluation pauses the active peer too; it is then waiting in the evaluation's
// collectives, which the transport's liveness rules tolerate (up to twice the timeout).
// Collectives share the streams between peers with these messages, and a message whose receive is
// not posted holds back the later ones from the same peer. A passive peer that ran ahead into an
// evaluation's all-reduce could so park its reply to an active peer (still in its steps) behind a
// collective message that peer reads only after the reply: a deadlock. So before each collective
// of the trainer (release() at an epoch's end; after apply() of a step that a K-step consensus
// report follows) a passive peer waits until its responders have answered every request of the
// steps before it; no later request comes before the active peer has finished the collectives.
// This waits only where the collective would wait anyway, and its pending deltas are then added
// to its model, so the consensus and the released mean are exact.
// The end: after its last step an active peer sends `done` to each passive neighbour, whose
// responder then exits; a passive peer's finish() joins its responders. A failure in a responder
// is stored and rethrown by the training thread at its next apply() (or finish()); a transport
// failure also poisons the transport, so that the training thread's own waits fail at once.
//
// Threads and the transport: the TCP transport with progress_thread (which overlaps = true
// requests) posts every operation to its I/O thread with asio::post, OpTable::post takes a lock,
// and without a driver OpTable::wait sleeps on a condition variable: several threads may post and
// wait at once. The in-process transport matches under the fabric's mutex, equally safe.
// Responders use the transport directly under op kOpAdPsgd; the training thread keeps its
// Communicator (other op ids) for the evaluation's collectives, which never share a tag with them.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/net/ops.h"
#include "runtime/core/rng.h"
#include "runtime/train/algorithms.h"

namespace dpg::train {
namespace {

using net::kOpAdPsgd;  // runtime/net/ops.h
constexpr uint32_t kHeaderChunk = 0;
constexpr uint32_t kModelChunk = 1;             // request pieces: kModelChunk + k
constexpr uint32_t kReplyChunk = 0x80000000u;   // reply pieces: kReplyChunk + k
constexpr std::size_t kChunkFloats = 64 * 1024; // 256 KiB per piece
constexpr uint32_t kMagic = 0x44504441;         // "ADPD"

enum Kind : uint32_t { kIdle = 1, kExchange = 2, kDone = 3 };

struct Header {
  uint32_t kind = kIdle;
  uint32_t magic = kMagic;
  uint64_t step = 0;  // the active peer's step (for the error messages)
};
static_assert(sizeof(Header) == 16);

std::string prefix(int rank) { return "rank " + std::to_string(rank) + ": ad-psgd: "; }

// The undirected graph of the run: the union of the first phase's period, both directions.
std::vector<std::vector<int>> undirected(const GossipPhase& phase) {
  const int n = phase.period.front().peers();
  std::vector<std::vector<int>> adj(static_cast<std::size_t>(n));
  for (const auto& g : phase.period) {
    for (int r = 0; r < n; ++r) {
      const auto nb = g.neighbourhood(r);
      auto& a = adj[static_cast<std::size_t>(r)];
      a.insert(a.end(), nb.recv_from.begin(), nb.recv_from.end());
      a.insert(a.end(), nb.send_to.begin(), nb.send_to.end());
    }
  }
  for (auto& a : adj) {
    std::sort(a.begin(), a.end());
    a.erase(std::unique(a.begin(), a.end()), a.end());
  }
  return adj;
}

}  // namespace

// colour[r]: 0 active, 1 passive; BFS from rank 0, the same on every peer. Throws
// invalid_argument naming the graph unless it is bipartite.
std::vector<int> ad_psgd_roles(const std::vector<GossipPhase>& phases, int rank) {
  if (phases.empty()) {
    fail(Code::invalid_argument, prefix(rank) + "needs a graph (topology)");
  }
  if (phases.size() > 1) {
    fail(Code::invalid_argument,
         prefix(rank) + "runs on one graph; a topology_schedule (here " +
             std::to_string(phases.size()) + " graphs, from \"" + phases.front().label +
             "\") is not supported");
  }
  const GossipPhase& phase = phases.front();
  const auto adj = undirected(phase);
  const std::size_t n = adj.size();
  std::vector<int> colour(n, -1);
  std::vector<std::size_t> queue;
  for (std::size_t root = 0; root < n; ++root) {
    if (colour[root] >= 0) continue;
    colour[root] = 0;
    queue.assign(1, root);
    for (std::size_t head = 0; head < queue.size(); ++head) {
      const std::size_t u = queue[head];
      for (int v : adj[u]) {
        auto& c = colour[static_cast<std::size_t>(v)];
        if (c < 0) {
          c = 1 - colour[u];
          queue.push_back(static_cast<std::size_t>(v));
        } else if (c == colour[u]) {
          fail(Code::invalid_argument,
               prefix(rank) + "the graph \"" + phase.label + "\" of " + std::to_string(n) +
                   " peers is not bipartite (it has an odd cycle through peers " +
                   std::to_string(u) + " and " + std::to_string(v) +
                   "): ad-psgd pairs active with passive peers and needs a bipartite graph "
                   "(e.g. an even ring, a hypercube, a torus with even sides)");
        }
      }
    }
  }
  return colour;
}

namespace {

class AdPsgdAlgorithm final : public Algorithm {
 public:
  explicit AdPsgdAlgorithm(const AlgoSetup& s)
      : comm_(*s.comm),
        transport_(s.comm->transport()),
        rank_(s.comm->rank()),
        label_(s.phases.empty() ? std::string() : s.phases.front().label),
        num_params_(s.num_params),
        chunks_((s.num_params + kChunkFloats - 1) / kChunkFloats),
        metrics_every_(s.config.metrics_every),
        rng_(s.config.seed, stream_for(stream::kPairing, static_cast<std::uint64_t>(rank_))),
        tracer_(s.tracer) {
    const auto colour = ad_psgd_roles(s.phases, rank_);
    if (static_cast<int>(colour.size()) != comm_.world()) {
      fail(Code::invalid_argument, prefix(rank_) + "the graph \"" + label_ + "\" has " +
                                       std::to_string(colour.size()) + " peers, the run " +
                                       std::to_string(comm_.world()));
    }
    active_ = colour[static_cast<std::size_t>(rank_)] == 0;
    neighbours_ = undirected(s.phases.front())[static_cast<std::size_t>(rank_)];
    rounds_.assign(neighbours_.size(), 0);
    if (active_) {
      headers_.resize(neighbours_.size());
      reply_.resize(num_params_);
    } else {
      pending_.assign(num_params_, 0.0f);
      inbox_.assign(neighbours_.size(), std::vector<float>(num_params_));
      replies_.assign(neighbours_.size(), std::vector<float>(num_params_));
      answered_.assign(neighbours_.size(), 0);
    }
    DPG_INFO("train: ad-psgd on " << label_ << ": rank " << rank_ << " is "
                                  << (active_ ? "active" : "passive") << ", "
                                  << neighbours_.size() << " neighbours");
  }

  ~AdPsgdAlgorithm() override {
    // After a failure elsewhere: responders answer no more requests and leave after their
    // current wait, which is bounded by the transport's timeout.
    stop_.store(true, std::memory_order_release);
    join_responders();
  }

  void before_gradient(long long, std::span<const float> params) override {
    if (!active_) start_responders(params);
  }

  void apply(long long t, const dp::PrivateGradient& mine, std::span<float> params,
             Sgd& sgd) override {
    if (active_) {
      average_with_one(t, params);
      sgd.apply(params, mine);
      return;
    }
    rethrow_responder_failure();
    model_ = params;
    steps_ = t + 1;
    {
      std::lock_guard lock(mu_);
      fold_pending(params);
      sgd.apply(params, mine);
    }
    if (metrics_every_ > 0 && steps_ % metrics_every_ == 0) settle();  // a consensus report
  }

  void finish(std::span<float> params) override {
    if (active_) {
      // `done` to every passive neighbour: their responders exit on it.
      for (std::size_t k = 0; k < neighbours_.size(); ++k) {
        headers_[k] = Header{kDone, kMagic, 0};
        sends_.push_back(transport_.send(neighbours_[k], tag(k, kHeaderChunk),
                                         std::as_bytes(std::span(&headers_[k], 1))));
      }
      wait_all(sends_);
      return;
    }
    start_responders(params);  // a run without steps still answers the `done`s
    join_responders();
    rethrow_responder_failure();
    std::lock_guard lock(mu_);
    fold_pending(params);
  }

  // A passive peer's model also takes the deltas of every averaging of the steps before this
  // evaluation here (see settle()).
  void release(std::span<const float> mine, std::span<float> out) override {
    if (!active_) settle();
    std::copy(mine.begin(), mine.end(), out.begin());
    comm_.allreduce(public_model(out), collective::Reduce::average);
  }

  bool replicas_differ() const override { return true; }

  // A passive peer answers every request of the steps before t and adds their deltas to its
  // model; an active peer has none in flight between its steps.
  void quiesce(long long) override {
    if (!active_) settle();
  }

  // Each step moves every per-pair counter by one (an active peer sends a header to every
  // passive neighbour each step), so at boundary t they are all t; what is left is the count of
  // pairings and an active peer's generator.
  void save(long long, Checkpoint& out) override {
    Json& a = out.meta["algo"];
    a["pairings"] = pairings_.load(std::memory_order_relaxed);
    if (active_) a["pairing_rng"] = rng_to_json(rng_.state());
  }
  void restore(long long t, const Checkpoint& in) override {
    JsonReader a(in.meta.at("algo"), in.where + ": /algo");
    pairings_.store(a.integer("pairings"), std::memory_order_relaxed);
    const auto round = static_cast<uint64_t>(t);
    rounds_.assign(neighbours_.size(), round);
    if (active_) {
      rng_ = Rng::from_state(rng_from_json(a.at("pairing_rng"), a.path("pairing_rng")));
      return;
    }
    std::lock_guard lock(mu_);
    answered_.assign(neighbours_.size(), round);
    first_round_ = round;
    steps_ = t;
  }

  void annotate(Json& line, long long, bool summary) const override {
    line["topology"] = label_;
    line["pairings"] = pairings_.load(std::memory_order_relaxed);
    if (summary) {
      line["role"] = active_ ? "active" : "passive";
      // Pairwise averaging at random times mixes by no fixed matrix: no rho, no spectral gap.
      line["rho"] = nullptr;
      line["spectral_gap"] = nullptr;
    }
  }

 private:
  net::Tag tag(std::size_t k, uint32_t chunk) const {
    return net::Tag{kOpAdPsgd, rounds_[k], chunk};
  }
  std::span<const float> piece(std::span<const float> v, std::size_t c) const {
    const std::size_t begin = c * kChunkFloats;
    return v.subspan(begin, std::min(kChunkFloats, v.size() - begin));
  }
  std::span<float> piece(std::span<float> v, std::size_t c) const {
    const std::size_t begin = c * kChunkFloats;
    return v.subspan(begin, std::min(kChunkFloats, v.size() - begin));
  }
  void wait_all(std::vector<net::Handle>& handles) {
    for (const auto& h : handles) transport_.wait(h);
    handles.clear();
  }

  // Active: a header to every passive neighbour, the model to one of them, its reply back.
  void average_with_one(long long t, std::span<float> params) {
    const std::size_t pick = static_cast<std::size_t>(rng_.below(neighbours_.size()));
    const int j = neighbours_[pick];
    for (std::size_t k = 0; k < neighbours_.size(); ++k) {
      headers_[k] = Header{k == pick ? kExchange : kIdle, kMagic, static_cast<uint64_t>(t)};
      sends_.push_back(transport_.send(neighbours_[k], tag(k, kHeaderChunk),
                                       std::as_bytes(std::span(&headers_[k], 1))));
    }
    for (std::size_t c = 0; c < chunks_; ++c) {
      recvs_.push_back(transport_.recv(
          j, tag(pick, kReplyChunk + static_cast<uint32_t>(c)),
          std::as_writable_bytes(piece(std::span<float>(reply_), c))));
    }
    for (std::size_t c = 0; c < chunks_; ++c) {
      sends_.push_back(transport_.send(j, tag(pick, kModelChunk + static_cast<uint32_t>(c)),
                                       std::as_bytes(piece(std::span<const float>(params), c))));
    }
    // The model may change only once its sends are done.
    wait_all(sends_);
    wait_all(recvs_);
    for (std::size_t i = 0; i < params.size(); ++i) params[i] = 0.5f * (params[i] + reply_[i]);
    for (auto& r : rounds_) ++r;
    pairings_.fetch_add(1, std::memory_order_relaxed);
  }

  // Passive, before a collective of the trainer: waits until the responders have answered every
  // request of the steps taken so far (steps_ per active neighbour), then adds the deltas to the
  // model. Bounded: a responder fails within twice the transport's timeout of its neighbour's
  // silence, and this gives up after that without any progress.
  void settle() {
    if (responders_.empty()) return;  // not started, or joined by finish()
    using Clock = std::chrono::steady_clock;
    const auto patience = 2 * transport_.timeout() + std::chrono::seconds(1);
    std::unique_lock lock(mu_);
    auto last_progress = Clock::now();
    uint64_t last_total = 0;
    for (;;) {
      if (failed_.load(std::memory_order_acquire)) throw Error(failure_code_, failure_);
      uint64_t total = 0;
      std::string behind;
      for (std::size_t k = 0; k < answered_.size(); ++k) {
        total += answered_[k];
        if (answered_[k] < static_cast<uint64_t>(steps_)) {
          behind += (behind.empty() ? "" : ", ") + std::to_string(neighbours_[k]);
        }
      }
      if (behind.empty()) break;
      if (total != last_total) {
        last_total = total;
        last_progress = Clock::now();
      } else if (Clock::now() - last_progress > patience) {
        fail(Code::deadline_exceeded,
             prefix(rank_) + "waiting after step " + std::to_string(steps_) +
                 " for the requests of peers " + behind + ": no progress for " +
                 std::to_string(std::chrono::duration_cast<std::chrono::seconds>(patience).count()) +
                 " s");
      }
      progress_.wait_for(lock, std::chrono::milliseconds(100));
    }
    if (model_.data() != nullptr) fold_pending(model_);
  }

  // Passive: params += pending, pending = 0. Caller holds mu_.
  void fold_pending(std::span<float> params) {
    if (params_.data() != nullptr && params.data() != params_.data()) {
      fail(Code::internal, prefix(rank_) + "apply() was given another model than the one the "
                                           "responders read");
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      params[i] += pending_[i];
      pending_[i] = 0.0f;
    }
  }

  void start_responders(std::span<const float> params) {
    if (!responders_.empty() || stop_.load(std::memory_order_acquire)) return;
    params_ = params;
    for (std::size_t k = 0; k < neighbours_.size(); ++k) {
      responders_.emplace_back([this, k] { respond(k); });
    }
  }

  void join_responders() {
    for (auto& th : responders_) {
      try {
        if (th.joinable()) th.join();
      } catch (const std::exception& e) {
        DPG_WARN(prefix(rank_) << "joining a responder: " << e.what());
      }
    }
    responders_.clear();
  }

  // The responder to active neighbour k: answers its requests until `done` or a failure.
  void respond(std::size_t k) {
    if (tracer_) tracer_->name_thread("responder");
    const int peer = neighbours_[k];
    uint64_t round = first_round_;
    try {
      for (;;) {
        Header h;
        const auto tag_of = [&](uint32_t chunk) { return net::Tag{kOpAdPsgd, round, chunk}; };
        transport_.wait(
            transport_.recv(peer, tag_of(kHeaderChunk), std::as_writable_bytes(std::span(&h, 1))));
        if (stop_.load(std::memory_order_acquire)) return;
        if (h.magic != kMagic || (h.kind != kIdle && h.kind != kExchange && h.kind != kDone)) {
          fail(Code::data_loss, prefix(rank_) + "peer " + std::to_string(peer) +
                                    " sent an unknown request (kind " + std::to_string(h.kind) +
                                    ") in round " + std::to_string(round));
        }
        if (h.kind == kDone) return;
        if (h.kind == kExchange) exchange(k, peer, tag_of);
        if (stop_.load(std::memory_order_acquire)) return;
        ++round;
        {
          std::lock_guard lock(mu_);
          answered_[k] = round;
        }
        progress_.notify_all();
      }
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      if (failure_.empty()) {
        std::string what = e.what();
        const std::string own = "rank " + std::to_string(rank_) + ": ";
        if (what.rfind(own, 0) == 0) what = what.substr(own.size());
        const auto* err = dynamic_cast<const Error*>(&e);
        failure_code_ = err ? err->code() : Code::internal;
        failure_ = prefix(rank_) + "answering peer " + std::to_string(peer) + " (round " +
                   std::to_string(round) + ") failed: " + what;
      }
      failed_.store(true, std::memory_order_release);
    }
    progress_.notify_all();
  }

  template <typename TagOf>
  void exchange(std::size_t k, int peer, const TagOf& tag_of) {
    std::span<float> inbox(inbox_[k]);
    std::span<float> reply(replies_[k]);
    std::vector<net::Handle> handles;
    for (std::size_t c = 0; c < chunks_; ++c) {
      handles.push_back(transport_.recv(peer, tag_of(kModelChunk + static_cast<uint32_t>(c)),
                                        std::as_writable_bytes(piece(inbox, c))));
    }
    for (const auto& h : handles) transport_.wait(h);
    handles.clear();
    if (stop_.load(std::memory_order_acquire)) return;
    {
      std::lock_guard lock(mu_);
      for (std::size_t i = 0; i < num_params_; ++i) {
        reply[i] = params_[i] + pending_[i];
        pending_[i] += 0.5f * (inbox[i] - reply[i]);
      }
    }
    pairings_.fetch_add(1, std::memory_order_relaxed);
    for (std::size_t c = 0; c < chunks_; ++c) {
      handles.push_back(transport_.send(peer, tag_of(kReplyChunk + static_cast<uint32_t>(c)),
                                        std::as_bytes(piece(std::span<const float>(reply), c))));
    }
    for (const auto& h : handles) transport_.wait(h);
  }

  void rethrow_responder_failure() {
    if (!failed_.load(std::memory_order_acquire)) return;
    std::lock_guard lock(mu_);
    throw Error(failure_code_, failure_);
  }

  collective::Communicator& comm_;
  net::Transport& transport_;
  int rank_;
  std::string label_;
  std::size_t num_params_;
  std::size_t chunks_;
  long long metrics_every_;  // the trainer's K-step consensus reports (collectives)
  Rng rng_;  // which neighbour to pair with (public: seeded by config.seed and rank)
  bool active_ = false;
  std::vector<int> neighbours_;    // the other colour, ascending
  std::vector<uint64_t> rounds_;   // active: per neighbour, the requests sent so far
  std::atomic<long long> pairings_{0};

  // Active.
  std::vector<Header> headers_;    // one per neighbour, alive until its send is waited on
  std::vector<float> reply_;
  std::vector<net::Handle> sends_, recvs_;

  // Passive: the responders read params_ and write pending_ (and the failure) under mu_; the
  // training thread writes params_ only under mu_.
  std::mutex mu_;
  std::span<const float> params_;
  std::span<float> model_;         // the same model, as apply() hands it over (training thread)
  long long steps_ = 0;            // steps taken (training thread)
  std::vector<uint64_t> answered_; // per active neighbour, the requests answered so far
  uint64_t first_round_ = 0;       // the responders' first round (a resumed run's step)
  std::condition_variable progress_;
  std::vector<float> pending_;
  std::vector<std::vector<float>> inbox_, replies_;  // per active neighbour
  trace::Tracer* tracer_;
  std::vector<std::thread> responders_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  Code failure_code_ = Code::internal;
  std::string failure_;
};

}  // namespace

std::unique_ptr<Algorithm> make_ad_psgd(const AlgoSetup& s) {
  return std::make_unique<AdPsgdAlgorithm>(s);
}

}  // namespace dpg::train
