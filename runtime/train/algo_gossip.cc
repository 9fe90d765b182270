// D-PSGD (Lian et al. 2017): each peer sends its pre-step model to its out-neighbours while it
// computes its gradient at that model, mixes x_i <- sum_j W_ij x_j, and steps with its own noised
// gradient. Every peer adds the full noise, since its model is all it sends.
#include <algorithm>
#include <string>
#include <vector>

#include "dp/network_dp.h"
#include "runtime/core/log.h"
#include "runtime/train/algorithms.h"

namespace dpg::train {
namespace {

// Why pairwise network DP (dp/network_dp.h) does not cover this run, or "" when it does: the
// bound assumes one fixed graph, a constant learning rate and no weight decay.
std::string pairwise_not_covered(const AlgoSetup& s) {
  if (!s.config.dp) return "no DP";
  if (s.phases.size() != 1 || s.phases.front().period.size() != 1)
    return "the graph changes during the run";
  if (s.config.weight_decay != 0.0) return "weight_decay is not 0";
  if (s.config.lr_schedule != LrSchedule::constant) return "the learning rate is not constant";
  if (s.phases.front().period.front().peers() > dp::kNetworkDpMaxPeers)
    return "more than " + std::to_string(dp::kNetworkDpMaxPeers) + " peers";
  return "";
}

class GossipAlgorithm final : public Algorithm {
 public:
  explicit GossipAlgorithm(const AlgoSetup& s)
      : comm_(*s.comm),
        gossip_(s.comm->transport(), make_schedule(s.phases, s.steps_per_epoch), s.num_params),
        q_(s.plan.accountant_q()),
        sigma_(s.plan.message_sigma),
        delta_(s.plan.delta),
        accountant_(s.plan.accountant),
        pairwise_why_not_(pairwise_not_covered(s)),
        device_(s.device),
        direct_(s.direct) {
    for (const auto& p : gossip_.schedule().phases()) {
      DPG_INFO("train: gossip on " << p.label << " from round " << p.start_round << ": rho "
                                   << p.spectrum.rho << ", spectral gap "
                                   << p.spectrum.spectral_gap);
    }
    if (pairwise_why_not_.empty()) {
      const topology::Topology& g = s.phases.front().period.front();
      peers_ = g.peers();
      distance_ = dp::graph_distances(g.matrix(), peers_);
      sigma_eff_ = dp::pairwise_noise_multipliers(g.matrix(), peers_, sigma_);
      for (std::size_t k = 0; k < distance_.size(); ++k) {
        if (distance_[k] >= 2) worst_hidden_sigma_ = std::min(worst_hidden_sigma_, sigma_eff_[k]);
      }
    }
  }

  void before_gradient(long long t, std::span<const float> params) override {
    gossip_.begin(t, public_model(params));
  }

  void apply(long long, const dp::PrivateGradient& mine, std::span<float> params,
             Sgd& sgd) override {
    gossip_.end(params);
    sgd.apply(params, mine);
  }

  // On the device. Over the transport, the pre-step model comes out through the staging buffers
  // and each chunk goes to the neighbours as it lands, while the gradient is computed; the
  // neighbours' models are mixed in on the host as they arrive, and the mixed model goes back.
  // With the direct collectives (NCCL), the models go from GPU to GPU (ncclSend/ncclRecv in one
  // group, started here and finished after the gradient, which is computed meanwhile at the same
  // model) into the device's neighbour buffers, and are mixed there.
  bool updates_on_device() const override { return device_ != nullptr; }
  void before_gradient_on_device(long long t) override {
    if (direct_ != nullptr) {
      start_direct(t);
      return;
    }
    host_.resize(device_->num_params());
    gossip_.begin(t, public_model(std::span<const float>(host_)), 0);
    device_->stream_out(model::DeviceArray::params,
                        model::chunk_ranges(host_.size(), gossip_.chunk_values()),
                        [&](std::size_t offset, std::span<const float> v) {
                          std::copy(v.begin(), v.end(), host_.begin() + static_cast<long>(offset));
                          gossip_.ready(offset + v.size());
                        });
  }
  void apply_on_device(long long t, const dp::PrivateGradient*,
                       const model::DeviceSgdOptions& sgd) override {
    if (direct_ != nullptr) {
      direct_->finish_exchange();
      const auto nb = gossip_.schedule().at(t).neighbourhood(comm_.rank());
      const std::vector<float> weights(nb.recv_weights.begin(), nb.recv_weights.end());
      device_->mix_params(static_cast<float>(nb.self_weight), weights);
    } else {
      gossip_.end(host_);
      device_->stream_in(model::DeviceArray::params, 0, host_);
    }
    device_->sgd_step(sgd);
  }

  void release(std::span<const float> mine, std::span<float> out) override {
    mean_over_peers(comm_, mine, out);
  }
  bool replicas_differ() const override { return true; }

  void annotate(Json& line, long long t, bool summary) const override {
    // The graph that mixed the last round taken.
    const auto& phase = gossip_.schedule().phase_at(std::max(0LL, t - 1));
    line["topology"] = phase.label;
    line["rho"] = phase.spectrum.rho;
    if (summary) line["spectral_gap"] = phase.spectrum.spectral_gap;
    annotate_pairwise(line, t, summary);
  }

 private:
  // Round t's models to and from the neighbours, GPU to GPU, without waiting for them.
  void start_direct(long long t) {
    const auto nb = gossip_.schedule().at(t).neighbourhood(comm_.rank());
    const std::size_t n = device_->num_params();
    const std::vector<float*> in = device_->neighbour_buffers(nb.recv_from.size());
    std::vector<collective::DeviceSend> sends;
    std::vector<collective::DeviceRecv> recvs;
    const float* params = device_->device_data(model::DeviceArray::params);
    for (const int p : nb.send_to) sends.push_back({p, params, n});
    for (std::size_t k = 0; k < nb.recv_from.size(); ++k) {
      recvs.push_back({nb.recv_from[k], in[k], n});
    }
    direct_->start_exchange(sends, recvs);
  }

  // Pairwise network DP beside the local epsilon: on every line, what the best-informed peer that
  // u does not send to learns of u's data (`pairwise_epsilon`, absent when every peer hears every
  // other directly); in the summary, the worst pair at each graph distance. By the plan's
  // accountant at the worst peer's rate, as message_epsilon.
  void annotate_pairwise(Json& line, long long t, bool summary) const {
    if (!pairwise_why_not_.empty()) {
      if (summary) line["pairwise"] = {{"not_reported", pairwise_why_not_}};
      return;
    }
    if (worst_hidden_sigma_ < kNone) {
      line["pairwise_epsilon"] =
          dp::pair_epsilon(q_, sigma_, worst_hidden_sigma_, t, delta_, accountant_);
    }
    if (!summary) return;
    Json rows = Json::array();
    for (const auto& r : dp::rows_by_distance(distance_, sigma_eff_, peers_, q_, sigma_, t, delta_,
                                              accountant_)) {
      rows.push_back({{"distance", r.distance},
                      {"pairs", r.pairs},
                      {"worst_epsilon", r.worst_epsilon},
                      {"least_noise_multiplier", r.least_sigma}});
    }
    line["pairwise"] = {{"by_distance", std::move(rows)},
                        {"assumptions", "docs/GOSSIP.md, \"What a curious neighbour learns\""}};
  }

  static constexpr double kNone = 1e300;
  collective::Communicator& comm_;
  Gossip gossip_;
  // The plan's figures for the worst peer's messages (q, sigma) and how it accounts them.
  double q_, sigma_, delta_;
  dp::AccountantKind accountant_;
  std::string pairwise_why_not_;
  int peers_ = 0;
  std::vector<int> distance_;
  std::vector<double> sigma_eff_;
  double worst_hidden_sigma_ = kNone;  // the least sigma_eff over pairs at distance >= 2
  model::DeviceMlp* device_;                // --device cuda
  collective::DeviceCollectives* direct_;   // --transport nccl
  std::vector<float> host_;                 // the model staged for the neighbours
};

}  // namespace

std::unique_ptr<Algorithm> make_gossip(const AlgoSetup& s) {
  return std::make_unique<GossipAlgorithm>(s);
}

}  // namespace dpg::train
