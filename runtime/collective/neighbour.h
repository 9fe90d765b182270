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

#include "runtime/core/wire.h"
#include "runtime/net/ops.h"
#include "runtime/net/transport.h"

namespace dpg::collective {

using net::kOpGossip;  // runtime/net/ops.h

class NeighbourExchange {
 public:
  // chunk_bytes: the piece each message is cut into (a few bytes reach the multi-chunk paths).
  // window_chunks: receive buffers per neighbour. The exchange holds neighbours x window_chunks
  // chunks, whatever the model's size: chunks beyond the window are received as earlier ones
  // are combined and their buffers freed, the transport holding them back meanwhile (its
  // contract: a message whose receive is not posted waits, in order, at the sender's side).
  NeighbourExchange(net::Transport& transport, std::size_t chunk_bytes = 256 * 1024,
                    std::size_t window_chunks = 8);

  // Posts the receives of the first window_chunks chunks from each peer in recv_from, then the
  // sends of `mine`'s first `ready` values (all of them by default, in whole chunks) to each peer
  // in send_to. `round` names this exchange: the same on both sides of every pair, unique among
  // the exchanges in flight. `mine` must stay alive, and unchanged once ready, until finish()
  // returns. One exchange at a time.
  void start(uint64_t round, Wire<const float> mine, std::span<const int> send_to,
             std::span<const int> recv_from, std::size_t ready = static_cast<std::size_t>(-1));
  // `mine`'s first `ready` values are in place (a model arriving from a device in pieces): sends
  // every chunk they complete that is not sent yet. finish() sends what is left.
  void ready(std::size_t ready);
  // Waits chunk by chunk: once chunk [begin, end) (element offsets) has arrived from every
  // neighbour, calls on_chunk(begin, end, pieces), pieces[k] being recv_from[k]'s floats of the
  // chunk (valid during the call only); then waits for the sends. Throws the transport's error
  // (naming the peer and the round) when a neighbour fails or stays silent.
  using OnChunk = std::function<void(std::size_t begin, std::size_t end,
                                     std::span<const std::span<const float>> pieces)>;
  void finish(const OnChunk& on_chunk);
  bool active() const { return active_; }
  std::size_t chunk_floats() const { return chunk_floats_; }
  // Floats held for receives: at most neighbours x window x chunk, whatever the model's size.
  std::size_t buffered_floats() const { return slots_.size(); }

 private:
  void post_recv(std::size_t chunk);
  std::pair<std::size_t, std::size_t> range(std::size_t chunk) const;

  net::Transport& transport_;
  std::size_t chunk_floats_;
  std::size_t window_;
  uint64_t round_ = 0;
  std::size_t count_ = 0;
  std::size_t chunks_ = 0;
  std::size_t stride_ = 0;  // floats per slot: the largest chunk of this exchange
  bool active_ = false;
  std::vector<int> recv_from_;
  std::vector<float> slots_;        // (window slot, neighbour, chunk_floats)
  std::vector<net::Handle> recvs_;  // (chunk, neighbour)
  std::vector<net::Handle> sends_;
  std::span<const float> mine_;
  std::vector<int> send_to_;
  std::size_t sent_chunks_ = 0;  // chunks of mine_ whose sends are posted
};

// out = self_weight * mine + sum_k weights[k] * pieces[k] over [begin, end) (pieces[k] holds
// that range, from its element 0), in neighbour order, so that the same inputs give the same
// bits on every peer.
void mix_range(std::span<float> out, float self_weight, std::span<const float> mine,
               std::span<const float> weights, std::span<const std::span<const float>> pieces,
               std::size_t begin, std::size_t end);

}  // namespace dpg::collective
