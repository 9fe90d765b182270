#include "apps/device_setup.h"

#include <algorithm>
#include <string>

#include "apps/device_backend.h"
#include "runtime/core/error.h"

namespace dpg::app {

train::Backends device_backends(const TrainConfig& c) {
  train::Backends b;
  const DeviceChoice d = parse_device(c.device);
  if (!d.cuda) return b;
  const std::string device = c.device;
  b.device = [device, index = d.index](const model::MlpSpec& spec, std::span<const float> params,
                                       int rank) {
    const DeviceBackend& cuda = device_backend("--device " + device);
    std::string why;
    const int n = cuda.device_count(&why);
    if (n == 0 || index >= n) {
      fail(Code::unavailable, "/device: rank " + std::to_string(rank) + " asked for " + device +
                                  ": " +
                                  (n == 0 ? why : "this machine has " + std::to_string(n) +
                                                      " CUDA devices, numbered from 0"));
    }
    return cuda.make_mlp(spec, index >= 0 ? index : rank % n, params);
  };
  if (c.transport == TransportMode::nccl) {
    b.direct = [index = d.index](collective::Communicator& comm) {
      const DeviceBackend& cuda = device_backend("--transport nccl");
      const int gpus = std::max(1, cuda.device_count(nullptr));
      return cuda.make_nccl(comm, index >= 0 ? index : comm.rank() % gpus, {});
    };
  }
  return b;
}

}  // namespace dpg::app
