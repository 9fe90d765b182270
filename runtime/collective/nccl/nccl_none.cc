// A build without NCCL (meson's summary says so): asking for it is a clear error.
#include "runtime/collective/nccl/nccl_communicator.h"
#include "runtime/core/error.h"

namespace dpg::collective {

const char* eager_kernel_loading_for_nccl() { return nullptr; }

std::unique_ptr<DeviceCollectives> make_nccl_collectives(Communicator& comm, int device,
                                                         NcclOptions) {
  fail(Code::unavailable, rank_prefix(comm.rank()) + "--transport nccl (GPU " +
                              std::to_string(device) + "): this build of dpgossip has no NCCL "
                              "communicator (meson found no CUDA toolkit or NCCL; its summary "
                              "lists what is built)");
}

}  // namespace dpg::collective
