// Local SGD with DP: every peer takes local_steps (H) DP-SGD steps on its own model with its own
// noised gradient, then the replicas are replaced by their average (an all-reduce of the
// parameters), and once more after the last step. Communication is one model per H steps instead
// of one gradient per step. Each peer's own noised updates reach its model before anyone sees
// it (Release::own): every local step is a release the plan accounts for.
//
// Only the parameters are averaged; each peer keeps its own momentum buffer. With H = 1 this is
// still the all-reduce algorithm: the peers start every step from the same average, and momentum,
// weight decay and the step are linear, so the mean of the peers' buffers follows the recursion
// of the all-reduce's one buffer and the mean of their steps is its step. With hierarchical, the
// average is taken within each host first (collective/hierarchical.h), most bytes over shared
// memory.
#include <optional>
#include <vector>

#include "runtime/train/algorithms.h"

namespace dpg::train {
namespace {

class LocalSgd final : public Algorithm {
 public:
  explicit LocalSgd(const AlgoSetup& s)
      : comm_(*s.comm), every_(s.config.local_steps), last_(s.plan.steps - 1),
        hierarchy_(make_hierarchy(s)), device_(s.device), direct_(s.direct) {}

  void apply(long long t, const dp::PrivateGradient& mine, std::span<float> params,
             Sgd& sgd) override {
    sgd.apply(params, mine);
    if (averages_after(t)) average(params);
  }

  // On the device: the local steps there, and the average of the parameters by the direct
  // collectives or through the host over the transport.
  bool updates_on_device() const override { return device_ != nullptr; }
  void apply_on_device(long long t, const dp::PrivateGradient*,
                       const model::DeviceSgdOptions& sgd) override {
    device_->sgd_step(sgd);
    if (!averages_after(t)) return;
    if (direct_ != nullptr) {
      direct_->allreduce(device_->device_data(model::DeviceArray::params), device_->num_params(),
                         collective::Reduce::average);
      return;
    }
    host_.resize(device_->num_params());
    model::stream_out_all(*device_, model::DeviceArray::params, host_);
    average(host_);
    device_->stream_in(model::DeviceArray::params, 0, host_);
  }

  void release(std::span<const float> mine, std::span<float> out) override {
    mean_over_peers(comm_, mine, out);
  }
  bool replicas_differ() const override { return true; }

  void annotate(Json& line, long long, bool) const override { line["local_steps"] = every_; }

 private:
  bool averages_after(long long t) const { return (t + 1) % every_ == 0 || t == last_; }
  void average(std::span<float> params) {
    if (hierarchy_) {
      hierarchy_->allreduce(public_model(params), collective::Reduce::average);
    } else {
      comm_.allreduce(public_model(params), collective::Reduce::average);
    }
  }

  collective::Communicator& comm_;
  long long every_;  // H
  long long last_;   // the run's last step, always followed by an average
  std::optional<collective::Hierarchy> hierarchy_;  // hierarchical: average within hosts first
  model::DeviceMlp* device_;                         // --device cuda
  collective::DeviceCollectives* direct_;            // --transport nccl
  std::vector<float> host_;                          // the parameters staged for the average
};

}  // namespace

std::unique_ptr<Algorithm> make_local_sgd(const AlgoSetup& s) {
  return std::make_unique<LocalSgd>(s);
}

}  // namespace dpg::train
