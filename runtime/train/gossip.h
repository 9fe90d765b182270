// D-PSGD's communication half: each round a peer sends its model to its out-neighbours in the
// graph in force, receives its in-neighbours' models while it computes its gradient, and mixes:
// x_i <- sum_j W_ij x_j. Also the consensus distance, the spread of the peers' models.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "runtime/collective/communicator.h"
#include "runtime/collective/neighbour.h"
#include "topology/schedule.h"

namespace dpg::train {

// The graphs of a run and when each comes into force (topology::Schedule::Phase: the config's
// entry, its label "ring", "exponential", "file:g.json", ..., and one graph or a time-varying
// period).
using GossipPhase = topology::Schedule::Phase;

// Turns phases given in epochs or steps into a schedule in rounds (one round per step), with
// `steps_per_epoch` = 1 / q. Epoch boundaries are those of the training loop.
topology::Schedule make_schedule(const std::vector<GossipPhase>& phases, double steps_per_epoch);

class Gossip {
 public:
  // `transport` must connect every peer of the schedule (Schedule::peers_of).
  Gossip(net::Transport& transport, topology::Schedule schedule, std::size_t num_params,
         std::size_t chunk_bytes = 256 * 1024);

  // Starts round `round`: this peer's model goes to the round's out-neighbours while theirs come
  // in. `params` must stay unchanged until end(). With `ready` below params.size(), only the
  // chunks of its first `ready` values go now; ready() sends the rest as it comes (a model
  // staged from a device), end() whatever is left.
  void begin(long long round, Wire<const float> params,
             std::size_t ready = static_cast<std::size_t>(-1));
  void ready(std::size_t ready) { exchange_.ready(ready); }
  // The values a message carries: what ready() should hand over at a time.
  std::size_t chunk_values() const { return exchange_.chunk_floats(); }
  // Waits for the neighbours' models and mixes them in chunk by chunk as they arrive.
  void end(std::span<float> params);

  const topology::Schedule& schedule() const { return schedule_; }

 private:
  topology::Schedule schedule_;
  int rank_;
  // The neighbours' models arrive through a fixed window of chunk buffers and are mixed into
  // mixed_ chunk by chunk: memory is one model plus the window, whatever the degree.
  collective::NeighbourExchange exchange_;
  std::vector<float> weights_;             // W_ij of each in-neighbour
  float self_weight_ = 1;
  std::span<const float> mine_;
  std::vector<float> mixed_;
};

// (1/n) sum_i ||x_i - x_bar||^2 over the peers of `comm`, and x_bar in `mean` (two all-reduces).
double consensus_distance(collective::Communicator& comm, std::span<const float> x,
                          std::vector<float>& mean);

}  // namespace dpg::train
