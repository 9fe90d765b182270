// Collectives on the memory a device model computes in (runtime/model/device_mlp.h): the
// all-reduce of a gradient or model and gossip's neighbour exchange, without a copy to the host.
// NCCL implements them on GPU memory (nccl/nccl_communicator.h). HostMemoryCollectives implements
// them over an ordinary communicator for memory the CPU can address: the device backend's host
// instance, so that the algorithms' direct path runs in the tests of every machine.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "runtime/collective/communicator.h"

namespace dpg::collective {

// A buffer of `count` floats in the device's memory, sent to or received from `peer`.
struct DeviceSend {
  int peer = 0;
  const float* data = nullptr;
  std::size_t count = 0;
};
struct DeviceRecv {
  int peer = 0;
  float* data = nullptr;
  std::size_t count = 0;
};

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  // In place: data (count floats in the device's memory) becomes the sum, or the average, over
  // every rank. Every rank calls it with the same count and op.
  virtual void allreduce(float* data, std::size_t count, Reduce op = Reduce::sum) = 0;
  // Gossip's neighbour exchange, all at once: every send is matched by its peer's receive from
  // this rank with the same count, in the same order among the buffers between the two ranks; a
  // rank may send to and receive from itself. No buffer may overlap a receive buffer.
  void exchange(std::span<const DeviceSend> sends, std::span<const DeviceRecv> recvs) {
    start_exchange(sends, recvs);
    finish_exchange();
  }
  // The same in two halves, so that the caller can compute while the buffers travel (gossip
  // computes its gradient at the model it sends). start_exchange posts every send and receive and
  // returns without waiting for the peers; finish_exchange waits for all of them, within the
  // operation deadline counted from its own call (the caller's work in between is not the peers'
  // to answer for), and is a no-op when none is in flight. In between, the send buffers may be
  // read but not written, and the receive buffers are not to be touched. One exchange at a time:
  // any other call finishes the one in flight first. The span arguments need not outlive the call;
  // the buffers they point to must outlive finish_exchange.
  virtual void start_exchange(std::span<const DeviceSend> sends,
                              std::span<const DeviceRecv> recvs) = 0;
  virtual void finish_exchange() = 0;
  // Where the run's host float all-reduces should go too (Communicator::route_float_allreduce),
  // or empty to leave them on the transport.
  virtual Communicator::FloatAllreduce host_route() { return {}; }
};

// The same operations over `comm`'s transport, on memory the CPU addresses. The all-reduce is
// comm's; start_exchange copies what goes to itself and posts every receive, then every send
// (net::kOpDeviceExchange tags numbered by call), so two ranks sending to each other first never
// wait on each other; the transport moves them while the caller computes, and finish_exchange
// waits for all.
class HostMemoryCollectives final : public DeviceCollectives {
 public:
  explicit HostMemoryCollectives(Communicator& comm) : comm_(comm) {}
  ~HostMemoryCollectives() override;
  void allreduce(float* data, std::size_t count, Reduce op = Reduce::sum) override;
  void start_exchange(std::span<const DeviceSend> sends,
                      std::span<const DeviceRecv> recvs) override;
  void finish_exchange() override;
  // Whether an exchange is posted and not yet finished.
  bool in_flight() const { return !in_flight_.empty(); }

 private:
  Communicator& comm_;
  std::uint64_t calls_ = 0;
  std::vector<net::Handle> in_flight_;  // the posted exchange's sends and receives
};

}  // namespace dpg::collective
