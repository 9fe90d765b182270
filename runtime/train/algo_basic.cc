// One peer, and synchronous data-parallel DP-SGD over the all-reduce: every peer noises its own
// clipped sum, the ring sums the noised gradients, and every replica takes the same step. With
// bucket_bytes > 0 the gradient goes out in buckets while the backward pass goes on
// (bucket_reducer.h). With hierarchical, the sum is taken within each host first
// (collective/hierarchical.h).
#include <optional>

#include "runtime/train/algorithms.h"
#include "runtime/train/bucket_reducer.h"

namespace dpg::train {
namespace {

class Single final : public Algorithm {
 public:
  explicit Single(const AlgoSetup& s) : device_(s.device) {}

  void apply(long long, const dp::PrivateGradient& mine, std::span<float> params,
             Sgd& sgd) override {
    sgd.apply(params, mine);
  }

  bool updates_on_device() const override { return device_ != nullptr; }
  void apply_on_device(long long, const dp::PrivateGradient*,
                       const model::DeviceSgdOptions& sgd) override {
    device_->sgd_step(sgd);
  }

 private:
  model::DeviceMlp* device_;
};

class AllReduce final : public Algorithm {
 public:
  explicit AllReduce(const AlgoSetup& s)
      : comm_(*s.comm), mechanism_(s.mechanism), hierarchy_(make_hierarchy(s)),
        device_(s.device), direct_(s.direct) {
    if (s.config.bucket_bytes > 0) {
      buckets_.emplace(*s.comm, s.mechanism, static_cast<std::size_t>(s.config.bucket_bytes),
                       s.tracer);
    }
    if (s.config.secure_aggregation) {
      masker_.emplace(agree_masks(*s.comm, shared_settings_hash(s.config)));
    }
  }

  bool streams_gradient() const override { return buckets_.has_value(); }
  std::size_t gradient_part_values() const override { return buckets_ ? buckets_->values() : 0; }
  void on_gradient_part(long long t, const dp::PrivateGradient& part,
                        std::size_t offset) override {
    buckets_->add(t, part, offset);
  }

  void apply(long long t, const dp::PrivateGradient& mine, std::span<float> params,
             Sgd& sgd) override {
    if (masker_) {
      // Every peer's noised grid values under its masks, summed modulo 2^32: the masks cancel.
      sgd.apply(params, mechanism_.aggregate(mine, [&](Wire<std::uint32_t> v) {
        masker_->mask(v.values(), static_cast<std::uint64_t>(t));
        comm_.allreduce(v);
      }));
      return;
    }
    sgd.apply(params, sum_over_peers(mine));
  }

  // On the device: the gradient is summed there by the direct collectives (it never leaves the
  // GPU), or its host copy over the transport as above, and the sum goes back for the step.
  bool updates_on_device() const override { return device_ != nullptr && !masker_; }
  bool needs_host_gradient() const override { return direct_ == nullptr; }
  void apply_on_device(long long, const dp::PrivateGradient* mine,
                       const model::DeviceSgdOptions& sgd) override {
    if (direct_ != nullptr) {
      direct_->allreduce(device_->device_data(model::DeviceArray::gradient),
                         device_->num_params());
    } else {
      device_->stream_in(model::DeviceArray::gradient, 0, sum_over_peers(*mine).values());
    }
    device_->sgd_step(sgd);
  }

  void annotate(Json& line, long long, bool summary) const override {
    // All-reduces of the run, those before a resume included.
    if (buckets_ && summary) line["buckets"] = buckets_before_ + buckets_->buckets();
  }

  void save(long long, Checkpoint& out) override {
    if (buckets_) out.meta["algo"]["buckets"] = buckets_before_ + buckets_->buckets();
  }
  void restore(long long, const Checkpoint& in) override {
    if (!buckets_) return;
    JsonReader r(in.meta.at("algo"), in.where + ": /algo");
    buckets_before_ = r.integer("buckets");
  }

 private:
  // The sum over the peers of their noised gradients, identical on every replica. With buckets,
  // the parts were summed in place as they came; what is left is to wait for them.
  dp::PrivateGradient sum_over_peers(const dp::PrivateGradient& mine) {
    return mechanism_.exchange(mine, [&](Wire<float> v) {
      if (buckets_) {
        buckets_->wait();
      } else if (hierarchy_) {
        hierarchy_->allreduce(v);
      } else {
        comm_.allreduce(v);
      }
    });
  }

  collective::Communicator& comm_;
  dp::GaussianMechanism& mechanism_;
  std::optional<collective::Hierarchy> hierarchy_;  // hierarchical
  std::optional<BucketReducer> buckets_;  // bucket_bytes > 0
  long long buckets_before_ = 0;          // reduced before the checkpoint this run resumed
  std::optional<dp::PairwiseMasker> masker_;  // secure_aggregation
  model::DeviceMlp* device_;                  // --device cuda
  collective::DeviceCollectives* direct_;     // --transport nccl
};

}  // namespace

dp::PairwiseMasker agree_masks(collective::Communicator& comm, std::uint64_t context) {
  const dp::SecAggKeyPair mine = dp::SecAggKeyPair::generate();
  const auto pub = mine.public_key();
  const auto n = static_cast<std::size_t>(comm.world());
  std::vector<std::byte> all(n * pub.size());
  comm.allgather(public_value(std::as_bytes(std::span(pub))), all);
  std::vector<std::optional<dp::PairKey>> keys(n);
  for (std::size_t r = 0; r < n; ++r) {
    if (static_cast<int>(r) == comm.rank()) continue;
    const auto* theirs = reinterpret_cast<const unsigned char*>(all.data() + r * pub.size());
    keys[r] = dp::agree_pair_key(mine, std::span(theirs, pub.size()), comm.rank(),
                                 static_cast<int>(r), context);
  }
  return dp::PairwiseMasker(comm.rank(), std::move(keys));
}

std::unique_ptr<Algorithm> make_single(const AlgoSetup& s) { return std::make_unique<Single>(s); }

std::unique_ptr<Algorithm> make_allreduce(const AlgoSetup& s) {
  return std::make_unique<AllReduce>(s);
}

}  // namespace dpg::train
