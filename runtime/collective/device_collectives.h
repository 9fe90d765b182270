// Collectives on the memory a device model computes in (runtime/model/device_mlp.h): the
// all-reduce of a gradient or model and gossip's neighbour exchange, without a copy to the host.
// NCCL implements them on GPU memory (nccl/nccl_communicator.h). HostMemoryCollectives implements
// them over an ordinary communicator for memory the CPU can address: the device backend's host
// instance, so that the algorithms' direct path runs in the tests of every machine.
#pragma once

#include <cstddef>
#include <span>

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
  virtual void exchange(std::span<const DeviceSend> sends, std::span<const DeviceRecv> recvs) = 0;
  // Where the run's host float all-reduces should go too (Communicator::route_float_allreduce),
  // or empty to leave them on the transport.
  virtual Communicator::FloatAllreduce host_route() { return {}; }
};

// The same operations over `comm`'s transport, on memory the CPU addresses. The all-reduce is
// comm's; the exchange posts every receive, then every send, then waits for all (net::kOpDevice
// tags numbered by call), so two ranks sending to each other first never wait on each other.
class HostMemoryCollectives final : public DeviceCollectives {
 public:
  explicit HostMemoryCollectives(Communicator& comm) : comm_(comm) {}
  void allreduce(float* data, std::size_t count, Reduce op = Reduce::sum) override;
  void exchange(std::span<const DeviceSend> sends, std::span<const DeviceRecv> recvs) override;

 private:
  Communicator& comm_;
  std::uint64_t calls_ = 0;
};

}  // namespace dpg::collective
