// Collectives over the transport interface: ring all-reduce (reduce-scatter then all-gather,
// each peer sending 2(N-1)/N of the buffer), broadcast, all-gather and barrier. Every peer must
// call the same collectives in the same order with the same sizes; each call takes a fresh round
// number, so tags never collide between calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "runtime/core/wire.h"
#include "runtime/net/ops.h"
#include "runtime/net/transport.h"

namespace dpg::collective {

enum class Reduce { sum, average };

struct Options {
  // Pieces each ring block is cut into, so that sending, receiving and reducing overlap. Small
  // values (a few bytes) reach the multi-segment paths in tests.
  std::size_t segment_bytes = 256 * 1024;
  // All-reduces up to this size use recursive doubling when the world is a power of two:
  // log2(N) exchanges of the whole buffer instead of 2(N-1) ring steps, for latency. 0: never.
  std::size_t small_bytes = 32 * 1024;
  // Reduce-scatter receives land in a ring of this many segment-sized buffers, small enough to
  // stay in cache, instead of a whole block: fewer trips to memory for large buffers.
  std::size_t scratch_slots = 4;
  // Above small_bytes and up to this size, a power-of-two world uses halving-doubling
  // (Rabenseifner): a reduce-scatter by recursive halving, then an all-gather by recursive
  // doubling; the ring's bytes in 2 log2(N) steps instead of 2(N-1). 0: never.
  std::size_t medium_bytes = 1024 * 1024;
  // Two communicators over one transport, used from two threads at once (the training thread's
  // and the bucketed all-reduce's communication thread), would give their calls the same tags:
  // each numbers its rounds from 0. Each needs a tag space of its own: its op ids are the
  // kOp* below plus kOpsPerSpace * tag_space, so no two spaces (nor gossip's op) share a tag.
  uint32_t tag_space = 0;
};

// The peers a communicator of `world` with these options talks to: the ring neighbours, plus the
// recursive-doubling partners (rank xor 2^k) when that path is on. A transport must connect them.
std::vector<int> peers_needed(int rank, int world, const Options& options);

// Operation ids in tags: runtime/net/ops.h holds every user's (tag space 0; see
// Options::tag_space).
using net::kOpAllgather;
using net::kOpAllreduce;
using net::kOpBroadcast;
using net::kOpsPerSpace;

// Groups one communicator may split off (collective/group.h), each with a tag space of its own.
inline constexpr int kMaxSplits = 64;

class Communicator {
 public:
  explicit Communicator(net::Transport& transport, Options options = {});

  int rank() const { return transport_.rank(); }
  int world() const { return transport_.world(); }
  net::Transport& transport() { return transport_; }
  const Options& options() const { return options_; }

  // Point-to-point for an algorithm's own protocol (ps-sync's pushes and pulls): a send carries
  // a Wire only, like the collectives; receives and waits are the transport's (transport.h).
  // Algorithms post no send on the transport itself (tools/check_map.py's "wire" check).
  net::Handle send(int peer, net::Tag tag, Wire<const std::byte> data) {
    return transport_.send(peer, tag, data.values());
  }
  net::Handle recv(int peer, net::Tag tag, std::span<std::byte> data) {
    return transport_.recv(peer, tag, data);
  }
  void wait(net::Handle h) { transport_.wait(h); }

  // Every collective carries Wire values only (runtime/core/wire.h: released gradients and
  // their sums, public models, named public values); what it writes into a Wire is as public.
  // In place; the result is bitwise identical on every peer.
  void allreduce(Wire<float> data, Reduce op = Reduce::sum);
  void allreduce(Wire<double> data, Reduce op = Reduce::sum);
  // The sum modulo 2^32 (unsigned wrap-around), by the same paths: exact, so every peer holds the
  // same bits whatever the order of the additions. For masked secure aggregation (dp/secagg.h),
  // where the pairwise masks cancel only in exact modular arithmetic. No average: integers divide
  // with a remainder, and the caller decodes its fixed point anyway.
  void allreduce(Wire<std::uint32_t> data);
  // Copies root's bytes into every peer's `data` (all the same size).
  void broadcast(Wire<std::byte> data, int root);
  // out (world * mine.size() bytes) gets every peer's `mine` in rank order.
  void allgather(Wire<const std::byte> mine, std::span<std::byte> out);
  // Returns once every peer has entered it.
  void barrier();

  // The two halves of the ring all-reduce, for collectives built from them (hierarchical.h).
  // reduce_scatter leaves this peer's owned_block(data.size()) reduced (summed, or averaged over
  // this communicator's peers) and the rest of `data` unspecified; allgather_blocks copies every
  // peer's owned block into every peer's `data`. Blocks split `count` into world() near-equal
  // ranges; the owned one is [begin, end).
  void reduce_scatter(Wire<float> data, Reduce op = Reduce::sum);
  void reduce_scatter(Wire<double> data, Reduce op = Reduce::sum);
  void allgather_blocks(Wire<float> data);
  void allgather_blocks(Wire<double> data);
  std::pair<std::size_t, std::size_t> owned_block(std::size_t count) const;

  // The number of splits of this communicator so far, then one more (collective/group.h).
  int take_split();

  // An accelerated path for this communicator's float all-reduces (device_collectives.h's
  // host_route(), NCCL's): every allreduce(std::span<float>) goes to it instead of the transport.
  // Every peer must route alike, or the peers would wait on different paths. Empty: the transport.
  // A route must not outlive what it calls: its owner sets an empty one before that goes.
  using FloatAllreduce = std::function<void(std::span<float> data, Reduce op)>;
  void route_float_allreduce(FloatAllreduce route) { float_route_ = std::move(route); }

 private:
  // Recursive doubling for small buffers on a power-of-two world, halving-doubling for medium
  // ones there, else the ring.
  template <typename T>
  void allreduce_any(std::span<T> data, Reduce op);
  template <typename T>
  void ring_allreduce(std::span<T> data, Reduce op);
  template <typename T>
  void ring(std::span<T> data, Reduce op, int first_step, int end_step);
  template <typename T>
  void doubling_allreduce(std::span<T> data, Reduce op);
  template <typename T>
  void halving_doubling_allreduce(std::span<T> data, Reduce op);
  uint64_t next_round() { return round_++; }
  // The op id of `op` in this communicator's tag space.
  uint32_t op_id(uint32_t op) const { return op + kOpsPerSpace * options_.tag_space; }

  net::Transport& transport_;
  Options options_;
  uint64_t round_ = 0;
  int splits_ = 0;
  FloatAllreduce float_route_;
  std::vector<std::byte> scratch_;        // two ring blocks, for the reduce-scatter receives
  std::vector<net::Handle> sends_, recvs_;  // (steps, segments)
  std::vector<char> sent_waited_;
};

}  // namespace dpg::collective
