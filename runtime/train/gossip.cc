#include "runtime/train/gossip.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/error.h"

namespace dpg::train {

topology::Schedule make_schedule(const std::vector<GossipPhase>& phases, double steps_per_epoch) {
  // Schedule's constructor checks that the phases start in order.
  return topology::Schedule(topology::Schedule::resolved(phases, steps_per_epoch));
}

Gossip::Gossip(net::Transport& transport, topology::Schedule schedule, std::size_t num_params,
               std::size_t chunk_bytes)
    : schedule_(std::move(schedule)),
      rank_(transport.rank()),
      exchange_(transport, chunk_bytes),
      mixed_(num_params) {
  if (schedule_.peers() != transport.world()) {
    fail(Code::invalid_argument, "gossip: the topology has " + std::to_string(schedule_.peers()) +
                                     " peers but the run has " +
                                     std::to_string(transport.world()));
  }
}

void Gossip::begin(long long round, Wire<const float> params, std::size_t ready) {
  const auto nb = schedule_.at(round).neighbourhood(rank_);
  self_weight_ = static_cast<float>(nb.self_weight);
  weights_.assign(nb.recv_weights.begin(), nb.recv_weights.end());
  mine_ = params.values();
  exchange_.start(static_cast<uint64_t>(round), params, nb.send_to, nb.recv_from, ready);
}

void Gossip::end(std::span<float> params) {
  if (params.data() != mine_.data() || params.size() != mine_.size()) {
    fail(Code::internal, "gossip: end() on another buffer than begin()");
  }
  exchange_.finish([&](std::size_t b, std::size_t e, std::span<const std::span<const float>> in) {
    collective::mix_range(mixed_, self_weight_, mine_, weights_, in, b, e);
  });
  std::copy(mixed_.begin(), mixed_.end(), params.begin());
}

double consensus_distance(collective::Communicator& comm, std::span<const float> x,
                          std::vector<float>& mean) {
  mean.assign(x.begin(), x.end());
  comm.allreduce(public_model(std::span<float>(mean)), collective::Reduce::average);
  double sq = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - mean[i];
    sq += d * d;
  }
  comm.allreduce(public_value(std::span<double>(&sq, 1)), collective::Reduce::sum);
  return sq / comm.world();
}

}  // namespace dpg::train
