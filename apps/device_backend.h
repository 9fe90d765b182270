// The CUDA backend of a run, as one table of entry points: the device MLP
// (runtime/model/device_mlp.h) and NCCL's collectives (runtime/collective/nccl/nccl_communicator.h).
//
// In dpgossip built with CUDA the table comes from the module dpgossip-cuda.so
// (device_backend_loader.cc), loaded on the first call, so a CPU peer never maps the CUDA
// libraries: cuBLASLt alone costs a process about 140 MiB of memory and 0.4 s of start-up in its
// static initialisers. The module's undefined symbols (logging, errors, the communicator) resolve
// to the program's own (it exports them), so both share one state. Without CUDA, and in unit
// tests, the table is the linked code's (device_backend_direct.cc).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "runtime/collective/nccl/nccl_communicator.h"
#include "runtime/model/device_mlp.h"

namespace dpg::app {

struct DeviceBackend {
  // model::cuda_device_count: 0 with `why` set where there is no usable GPU.
  int (*device_count)(std::string* why);
  // model::make_cuda_mlp.
  std::unique_ptr<model::DeviceMlp> (*make_mlp)(const model::MlpSpec& spec, int device,
                                                std::span<const float> params);
  // collective::make_nccl_collectives.
  std::unique_ptr<collective::DeviceCollectives> (*make_nccl)(collective::Communicator& comm,
                                                              int device,
                                                              collective::NcclOptions options);
  // collective::eager_kernel_loading_for_nccl (before the first CUDA call and any thread).
  const char* (*eager_kernel_loading_for_nccl)();
};

// The backend, loaded on the first call where it is a module. Throws unavailable starting with
// `asked_by` (the flag or rank that wanted it) when the module cannot be loaded, naming the
// module's path and the loader's reason (a missing CUDA library, most often).
const DeviceBackend& device_backend(std::string_view asked_by);

// The table of the code this program links (device_backend_linked.cc): CUDA's where the build has
// it, else the factories that say the build has none. The module's entry point returns it.
const DeviceBackend& linked_device_backend();

// The module's entry point and the version of the table it returns: the loader refuses a module
// whose version or table size differs (a module of another build).
inline constexpr unsigned kDeviceBackendVersion = 1;
extern "C" const DeviceBackend* dpg_device_backend(unsigned version, std::size_t table_size);

}  // namespace dpg::app
