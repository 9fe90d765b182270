// One peer, and synchronous data-parallel DP-SGD over the all-reduce: every peer noises its own
// clipped sum, the ring sums the noised gradients, and every replica takes the same step.
#include "runtime/train/algorithms.h"

namespace dpg::train {
namespace {

class Single final : public Algorithm {
 public:
  void apply(long long, const dp::PrivateGradient& mine, std::span<float> params,
             Sgd& sgd) override {
    sgd.apply(params, mine);
  }
};

class AllReduce final : public Algorithm {
 public:
  explicit AllReduce(const AlgoSetup& s) : comm_(*s.comm), mechanism_(s.mechanism) {}

  void apply(long long, const dp::PrivateGradient& mine, std::span<float> params,
             Sgd& sgd) override {
    // The sum over the peers of their noised gradients, identical on every replica.
    const dp::PrivateGradient sum =
        mechanism_.exchange(mine, [&](std::span<float> v) { comm_.allreduce(v); });
    sgd.apply(params, sum);
  }

 private:
  collective::Communicator& comm_;
  dp::GaussianMechanism& mechanism_;
};

}  // namespace

std::unique_ptr<Algorithm> make_single(const AlgoSetup&) { return std::make_unique<Single>(); }

std::unique_ptr<Algorithm> make_allreduce(const AlgoSetup& s) {
  return std::make_unique<AllReduce>(s);
}

}  // namespace dpg::train
