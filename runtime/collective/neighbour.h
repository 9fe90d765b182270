// Neighbour exchange for gossip: one buffer goes to some peers while same-sized buffers come in
// from others, cut in chunks so that the caller can combine each chunk as soon as every
// neighbour's copy of it has arrived. The exchange is started, left running while the caller
// computes (the transport must make progress on its own, e.g. TCP with an I/O thread), and then
// finished. Nothing here knows a topology: the caller names the peers and the weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "runtime/net/ops.h"
#include "runtime/net/transport.h"

namespace dpg::collective {

using net::kOpGossip;  // runtime/net/ops.h

class NeighbourExchange {
 public:
  // chunk_bytes: the piece each message is cut into (a few bytes reach the multi-chunk paths).
  NeighbourExchange(net::Transport& transport, std::size_t chunk_bytes = 256 * 1024);

  // Posts the receive of every chunk from each peer in recv_from into inbox[k] (inbox[k] belongs
  // to recv_from[k], each mine.size() floats), then the sends of `mine` to each peer in send_to.
  // `round` names this exchange: the same on both sides of every pair, unique among the
  // exchanges in flight. `mine` and the inboxes must stay alive, and `mine` unchanged, until
  // finish() returns. One exchange at a time.
  void start(uint64_t round, std::span<const float> mine, std::span<const int> send_to,
             std::span<const int> recv_from, std::span<const std::span<float>> inbox);
  // Waits chunk by chunk: once chunk [begin, end) (element offsets) has arrived from every
  // neighbour, calls on_chunk(begin, end); then waits for the sends. Throws the transport's
  // error (naming the peer and the round) when a neighbour fails or stays silent.
  void finish(const std::function<void(std::size_t begin, std::size_t end)>& on_chunk);
  bool active() const { return active_; }

 private:
  net::Transport& transport_;
  std::size_t chunk_floats_;
  std::size_t count_ = 0;
  std::size_t chunks_ = 0;
  bool active_ = false;
  std::vector<net::Handle> recvs_;  // (chunk, neighbour)
  std::vector<net::Handle> sends_;
  std::size_t neighbours_ = 0;
};

// out = self_weight * mine + sum_k weights[k] * inbox[k] over [begin, end), in neighbour order,
// so that the same inputs give the same bits on every peer.
void mix_range(std::span<float> out, float self_weight, std::span<const float> mine,
               std::span<const float> weights, std::span<const std::span<float>> inbox,
               std::size_t begin, std::size_t end);

}  // namespace dpg::collective
