#include "apps/device_backend.h"

namespace dpg::app {

namespace {

std::unique_ptr<collective::DeviceCollectives> make_nccl(collective::Communicator& comm, int device,
                                                         collective::NcclOptions options) {
  return collective::make_nccl_collectives(comm, device, options);
}

}  // namespace

const DeviceBackend& linked_device_backend() {
  static const DeviceBackend table{
      .device_count = &model::cuda_device_count,
      .make_mlp = &model::make_cuda_mlp,
      .make_nccl = &make_nccl,
      .eager_kernel_loading_for_nccl = &collective::eager_kernel_loading_for_nccl,
  };
  return table;
}

}  // namespace dpg::app
