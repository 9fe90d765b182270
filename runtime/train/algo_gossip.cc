// D-PSGD (Lian et al. 2017): each peer sends its pre-step model to its out-neighbours while it
// computes its gradient at that model, mixes x_i <- sum_j W_ij x_j, and steps with its own noised
// gradient. Every peer adds the full noise, since its model is all it sends.
#include <algorithm>
#include <string>
#include <vector>

#include "runtime/core/log.h"
#include "runtime/train/algorithms.h"

namespace dpg::train {
namespace {

// Why a gossip run reports no pairwise network epsilon (docs/GOSSIP.md): dp/network_dp.h's bound
// holds for a model linear in its gradients, and no published theorem covers gossip DP-SGD on a
// non-linear model. The local epsilon is the run's guarantee.
constexpr const char* kPairwiseNotProved =
    "not proved for this run: the pairwise bound (dpgossip privacy --topology, docs/GOSSIP.md) "
    "holds for a model linear in its gradients, and no published theorem (Cyffers and Bellet "
    "2022, Muffliato) covers gossip DP-SGD on a non-linear model such as this MLP, whose hidden "
    "peers' gradients may relay what their models hold; the local epsilon holds";

class GossipAlgorithm final : public Algorithm {
 public:
  explicit GossipAlgorithm(const AlgoSetup& s)
      : comm_(*s.comm),
        gossip_(s.comm->transport(), make_schedule(s.phases, s.steps_per_epoch), s.num_params),
        dp_(s.config.dp),
        device_(s.device),
        direct_(s.direct) {
    for (const auto& p : gossip_.schedule().phases()) {
      DPG_INFO("train: gossip on " << p.label << " from round " << p.start_round << ": rho "
                                   << p.spectrum.rho << ", spectral gap "
                                   << p.spectrum.spectral_gap);
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
    if (!summary) return;
    line["spectral_gap"] = phase.spectrum.spectral_gap;
    line["pairwise"] = {{"not_reported", dp_ ? kPairwiseNotProved : "no DP"}};
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

  collective::Communicator& comm_;
  Gossip gossip_;
  bool dp_;  // whether the run is private (the summary's reason for no pairwise figure)
  model::DeviceMlp* device_;                // --device cuda
  collective::DeviceCollectives* direct_;   // --transport nccl
  std::vector<float> host_;                 // the model staged for the neighbours
};

}  // namespace

std::unique_ptr<Algorithm> make_gossip(const AlgoSetup& s) {
  return std::make_unique<GossipAlgorithm>(s);
}

}  // namespace dpg::train
