// AD-PSGD (Lian et al., ICML 2018): asynchronous decentralized SGD. The graph (one phase) must be
// bipartite; every peer 2-colours it the same way (BFS from rank 0): colour 0 is active, colour 1
// passive, so no two requests wait on each other. At step t an active peer i picks one passive
// neighbour j (its own generator, seeded by config.seed and rank: uniformly, or under --balance
// speed in proportion to the neighbours' measured speeds, so that a slow peer, whose responder
// answers late when its whole process is slowed, is asked less often), sends x_i and gets back
// x_j' = x_j + pending_j, then x_i <- (x_i + x_j') / 2 and its SGD step; j's responder records
// pending_j += (x_i - x_j') / 2 under a short mutex, and j's training thread adds pending_j to its
// model before its own step. The pair's sum, and with lr 0 the mean, is kept (up to rounding).
// Each peer adds the full noise to its own gradient (Release::own): its model is all it sends.
// Messages: a collective::Service under op kOpAdPsgd, round = the active peer's step; `exchange`
// (the model each way, sizes fixed by the model's) to the one it pairs with, a one-way `idle` to
// the others, so that a responder's wait spans one step of its active neighbour and a stalled or
// dead peer is named within the timeout (the service's blame). Where the model must be settled
// (release(), save()), a passive peer drains the service and
// adds its pending deltas; save() keeps what is pending at the boundary.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>

#include "runtime/collective/service.h"
#include "runtime/core/check.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/core/rng.h"
#include "runtime/net/ops.h"
#include "runtime/train/algorithms.h"
#include "topology/topology.h"

namespace dpg::train {
namespace {

using net::kOpAdPsgd;  // runtime/net/ops.h
std::string prefix(int rank) { return rank_prefix(rank) + "ad-psgd: "; }

}  // namespace

// colour[r]: 0 active, 1 passive; BFS from rank 0, the same on every peer. Throws
// invalid_argument naming the graph unless it is bipartite.
std::vector<int> ad_psgd_roles(const std::vector<GossipPhase>& phases, int rank) {
  if (phases.empty()) fail(Code::invalid_argument, prefix(rank) + "needs a graph (topology)");
  if (phases.size() > 1) {
    fail(Code::invalid_argument, prefix(rank) + "runs on one graph; a topology_schedule (here " +
                                     std::to_string(phases.size()) + " graphs, from \"" +
                                     phases.front().label + "\") is not supported");
  }
  const GossipPhase& phase = phases.front();
  const auto two = topology::two_colouring(topology::undirected_union(phase.period));
  if (two.colour.empty()) {
    fail(Code::invalid_argument,
         prefix(rank) + "the graph \"" + phase.label + "\" of " +
             std::to_string(phase.period.front().peers()) +
             " peers is not bipartite (it has an odd cycle through peers " +
             std::to_string(two.odd_u) + " and " + std::to_string(two.odd_v) +
             "): ad-psgd pairs active with passive peers and needs a bipartite graph "
             "(e.g. an even ring, a hypercube, a torus with even sides)");
  }
  return two.colour;
}

namespace {

class AdPsgdAlgorithm final : public Algorithm {
 public:
  explicit AdPsgdAlgorithm(const AlgoSetup& s)
      : comm_(*s.comm),
        rank_(s.comm->rank()),
        label_(s.phases.empty() ? std::string() : s.phases.front().label),
        rng_(s.config.seed, stream_for(stream::kPairing, static_cast<std::uint64_t>(rank_))),
        service_(s.comm->transport(), kOpAdPsgd, "ad-psgd",
                 {{0, 0, true}, {s.num_params * sizeof(float), s.num_params * sizeof(float)}},
                 s.tracer) {
    const auto colour = ad_psgd_roles(s.phases, rank_);
    if (static_cast<int>(colour.size()) != comm_.world()) {
      fail(Code::invalid_argument, prefix(rank_) + "the graph \"" + label_ + "\" has " +
                                       std::to_string(colour.size()) + " peers, the run " +
                                       std::to_string(comm_.world()));
    }
    active_ = colour[static_cast<std::size_t>(rank_)] == 0;
    neighbours_ = topology::undirected_union(s.phases.front().period)[static_cast<std::size_t>(rank_)];
    (active_ ? reply_ : pending_).assign(s.num_params, 0.0f);
    if (!active_) answer_.assign(s.num_params, 0.0f);
    std::ostringstream chances;
    if (active_ && !s.peer_share.empty()) {
      DPG_CHECK(static_cast<int>(s.peer_share.size()) == comm_.world());
      for (int j : neighbours_) weights_.push_back(s.peer_share[static_cast<std::size_t>(j)]);
      const double total = std::accumulate(weights_.begin(), weights_.end(), 0.0);
      chances << ", partners by speed:";
      for (std::size_t k = 0; k < neighbours_.size(); ++k) {
        chances << " rank " << neighbours_[k] << " " << weights_[k] / total;
      }
    }
    DPG_INFO("train: ad-psgd on " << label_ << ": this peer is "
                                  << (active_ ? "active" : "passive") << ", "
                                  << neighbours_.size() << " neighbours" << chances.str());
  }

  void before_gradient(long long, std::span<const float> x) override {
    if (!active_) start_responders(x);
  }

  void apply(long long t, const dp::PrivateGradient& mine, std::span<float> params,
             Sgd& sgd) override {
    if (active_) average_with_one(t, params);
    if (active_) return sgd.apply(params, mine);
    service_.rethrow();
    model_ = params;
    steps_ = t + 1;
    std::unique_lock lock(mu_);
    fold_pending(params);
    sgd.apply(params, mine);
  }

  void finish(std::span<float> params) override {
    if (active_) return service_.finish(neighbours_);
    start_responders(params);  // a run without steps still hears the `done`s
    service_.join();
    std::lock_guard lock(mu_);
    fold_pending(params);
  }

  void release(std::span<const float> mine, std::span<float> out) override {
    if (!active_) settle();
    std::copy(mine.begin(), mine.end(), out.begin());
    comm_.allreduce(public_model(out), collective::Reduce::average);
  }

  bool replicas_differ() const override { return true; }

  // A passive peer's model with the deltas its responders have recorded since its last step.
  void current_model(std::span<const float> params, std::span<float> out) const override {
    std::copy(params.begin(), params.end(), out.begin());
    if (active_) return;
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += pending_[i];
  }

  // At boundary t: a passive peer keeps the deltas of the requests answered since its last step.
  void save(long long t, Checkpoint& out) override {
    Json& a = out.meta["algo"];
    a["pairings"] = pairings_.load(std::memory_order_relaxed);
    if (active_) return void(a["pairing_rng"] = rng_to_json(rng_.state()));
    if (service_.serving()) service_.drain(static_cast<uint64_t>(t));
    std::lock_guard lock(mu_);
    out.put("algo/pending", std::span<const float>(pending_));
  }
  void restore(long long t, const Checkpoint& in) override {
    JsonReader a(in.meta.at("algo"), in.where + ": /algo");
    pairings_.store(a.integer("pairings"), std::memory_order_relaxed);
    first_round_ = static_cast<uint64_t>(t);
    service_.number_from(first_round_);
    if (active_) rng_ = Rng::from_state(rng_from_json(a.at("pairing_rng"), a.path("pairing_rng")));
    else in.get("algo/pending", std::span<float>(pending_));
    steps_ = t;
  }

  void annotate(Json& line, long long, bool summary) const override {
    line["topology"] = label_;
    line["pairings"] = pairings_.load(std::memory_order_relaxed);
    if (!summary) return;
    line["role"] = active_ ? "active" : "passive";
    line["pairing"] = weights_.empty() ? "uniform" : "by speed";
    // Pairwise averaging at random times mixes by no fixed matrix: no rho, no spectral gap.
    line["rho"] = line["spectral_gap"] = nullptr;
  }

 private:
  enum Op : uint32_t { kIdle = 0, kExchange = 1 };

  // Active: a notice to every passive neighbour, the model to one of them, its reply back.
  void average_with_one(long long t, std::span<float> params) {
    const std::size_t pick = pick_partner();
    std::vector<int> tickets;
    for (std::size_t k = 0; k < neighbours_.size(); ++k) {
      tickets.push_back(
          k != pick ? service_.call(neighbours_[k], kIdle, t, public_value(std::span<const std::byte>()), {})
                    : service_.call(neighbours_[k], kExchange, t,
                                    public_model(std::span<const float>(params)).bytes(),
                                    std::as_writable_bytes(std::span(reply_))));
    }
    for (int ticket : tickets) service_.wait(ticket);  // then the model may change
    for (std::size_t i = 0; i < params.size(); ++i) params[i] = 0.5f * (params[i] + reply_[i]);
    pairings_.fetch_add(1, std::memory_order_relaxed);
  }

  // Active: the index of the neighbour to pair with, uniform or weighted by speed. A weighted
  // choice keeps each pairing a symmetric average (doubly stochastic), and every neighbour keeps a
  // chance (the balancer's floor), so the graph stays connected in expectation.
  std::size_t pick_partner() {
    if (weights_.empty()) return static_cast<std::size_t>(rng_.below(neighbours_.size()));
    double u = rng_.uniform() * std::accumulate(weights_.begin(), weights_.end(), 0.0);
    for (std::size_t k = 0; k + 1 < weights_.size(); ++k) {
      if (u < weights_[k]) return k;
      u -= weights_[k];
    }
    return weights_.size() - 1;
  }

  // Passive, before a collective that reads the model: the steps' requests answered, deltas added.
  void settle() {
    if (!service_.serving()) return;  // not started, or joined by finish()
    service_.drain(static_cast<uint64_t>(steps_));
    std::lock_guard lock(mu_);
    if (model_.data() != nullptr) fold_pending(model_);
  }

  // Passive: params += pending, pending = 0. Caller holds mu_.
  void fold_pending(std::span<float> params) {
    DPG_CHECK(params_.data() == nullptr || params.data() == params_.data());
    for (std::size_t i = 0; i < params.size(); ++i) params[i] += std::exchange(pending_[i], 0.0f);
  }

  // Passive: a responder per active neighbour answers each exchange at once (see the top).
  void start_responders(std::span<const float> params) {
    if (service_.serving()) return;
    params_ = params;
    using Reply = collective::Service::Reply;
    service_.serve(neighbours_, first_round_, [this](const auto& r, Wire<const std::byte> in,
                                                     Reply& out) {
      if (r.op != kExchange) return;
      const std::span<const float> x = in.as<float>().values();
      std::lock_guard lock(mu_);
      // The reply is this peer's model as it stands (a public model: its updates and mixes).
      for (std::size_t i = 0; i < pending_.size(); ++i) {
        answer_[i] = params_[i] + pending_[i];
        pending_[i] += 0.5f * (x[i] - answer_[i]);
      }
      out.put(0, public_model(std::span<const float>(answer_)).bytes());
      pairings_.fetch_add(1, std::memory_order_relaxed);
    });
  }

  collective::Communicator& comm_;
  int rank_;
  std::string label_;
  Rng rng_;  // which neighbour to pair with (public: seeded by config.seed and rank)
  bool active_ = false;
  std::vector<int> neighbours_;  // the other colour, ascending
  std::vector<double> weights_;  // active under --balance speed: neighbours_'s shares; else empty
  std::atomic<long long> pairings_{0};
  std::vector<float> reply_;     // active: the paired neighbour's model
  // Passive: the responders read params_ and write pending_ under mu_, as apply() the model.
  mutable std::mutex mu_;
  std::span<const float> params_;
  std::span<float> model_;         // the same model, as apply() hands it over
  long long steps_ = 0;            // steps taken (training thread)
  uint64_t first_round_ = 0;       // a resumed run's first step
  std::vector<float> pending_;
  std::vector<float> answer_;      // passive: the reply being formed (under mu_)
  collective::Service service_;    // last: its responders stop before the state they use goes
};

}  // namespace

std::unique_ptr<Algorithm> make_ad_psgd(const AlgoSetup& s) {
  return std::make_unique<AdPsgdAlgorithm>(s);
}

}  // namespace dpg::train
