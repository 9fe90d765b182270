// D-PSGD (Lian et al. 2017): each peer sends its pre-step model to its out-neighbours while it
// computes its gradient at that model, mixes x_i <- sum_j W_ij x_j, and steps with its own noised
// gradient. Every peer adds the full noise, since its model is all it sends.
#include <algorithm>

#include "runtime/core/log.h"
#include "runtime/train/algorithms.h"

namespace dpg::train {
namespace {

class GossipAlgorithm final : public Algorithm {
 public:
  explicit GossipAlgorithm(const AlgoSetup& s)
      : comm_(*s.comm),
        gossip_(s.comm->transport(), make_schedule(s.phases, s.steps_per_epoch), s.num_params) {
    for (const auto& p : gossip_.schedule().phases()) {
      DPG_INFO("train: gossip on " << p.label << " from round " << p.start_round << ": rho "
                                   << p.spectrum.rho << ", spectral gap "
                                   << p.spectrum.spectral_gap);
    }
  }

  void before_gradient(long long t, std::span<const float> params) override {
    gossip_.begin(t, params);
  }

  void apply(long long, const dp::PrivateGradient& mine, std::span<float> params,
             Sgd& sgd) override {
    gossip_.end(params);
    sgd.apply(params, mine);
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
  }

 private:
  collective::Communicator& comm_;
  Gossip gossip_;
};

}  // namespace

std::unique_ptr<Algorithm> make_gossip(const AlgoSetup& s) {
  return std::make_unique<GossipAlgorithm>(s);
}

}  // namespace dpg::train
