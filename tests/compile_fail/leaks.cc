// Code that must not compile: each CASE hands something other than a Wire (runtime/core/wire.h)
// to what carries values to other peers. CASE 0 is the control: the same calls through the named
// issuers, which must compile (so a failure of the others is the type's doing, not a broken
// include path). run.sh compiles every case and checks each verdict.
#include <span>
#include <vector>

#include "runtime/collective/communicator.h"
#include "dp/mechanism.h"
#include "runtime/collective/neighbour.h"
#include "runtime/collective/service.h"
#include "runtime/core/wire.h"

namespace {

// `clipped_sum` stands for anything derived from private data without noise.
[[maybe_unused]] void leak(dpg::collective::Communicator& comm,
                           dpg::collective::NeighbourExchange& exchange,
                           dpg::collective::Service& service,
                           std::vector<float>& clipped_sum) {
  const std::vector<int> peers = {1};
  const std::span<const float> sum(clipped_sum);
  std::vector<std::byte> reply(8);
#if CASE == 0
  comm.allreduce(dpg::public_value(clipped_sum));
  comm.broadcast(dpg::public_value(clipped_sum).bytes(), 0);
  exchange.start(0, dpg::public_model(std::span<const float>(clipped_sum)), peers, peers);
  comm.send(1, {}, dpg::public_model(sum).bytes());
  service.call(1, 0, 0, dpg::public_model(sum).bytes(), reply);
  (void)dpg::dp::PrivateGradient::from_peer(dpg::arrived(sum), 1.0);
#elif CASE == 1
  // a raw buffer through the all-reduce; expect: no matching function for call to .*allreduce
  comm.allreduce(std::span<float>(clipped_sum));
#elif CASE == 2
  // raw bytes through the broadcast; expect: cannot convert .*std::byte.* to .*Wire
  comm.broadcast(std::as_writable_bytes(std::span<float>(clipped_sum)), 0);
#elif CASE == 3
  // a Wire made outside its issuers; expect: is private within this context
  dpg::Wire<float> forged{std::span<float>(clipped_sum)};
  comm.allreduce(forged);
#elif CASE == 4
  // a raw model through gossip's exchange; expect: cannot convert .*span<const float>.* to .*Wire
  exchange.start(0, std::span<const float>(clipped_sum), peers, peers);
#elif CASE == 5
  // raw bytes through the all-gather; expect: cannot convert .*std::byte.* to .*Wire
  comm.allgather(std::as_bytes(std::span<float>(clipped_sum)), {});
#elif CASE == 6
  // raw bytes through an algorithm's point-to-point send; expect: cannot convert .*std::byte.* to .*Wire
  comm.send(1, {}, std::as_bytes(sum));
#elif CASE == 7
  // a raw request through the message service; expect: cannot convert .*std::byte.* to .*Wire
  service.call(1, 0, 0, std::as_bytes(sum), reply);
#elif CASE == 8
  // a local buffer passed off as a peer's released gradient; expect: cannot convert .*span<const float>.* to .*Wire
  (void)dpg::dp::PrivateGradient::from_peer(sum, 1.0);
#endif
}

}  // namespace
