// The host instance of the device MLP (device_mlp.h): the same source as the CUDA one, with
// Thrust's C++ backend, the CPU sgemm and cuRAND's host generator. The reference tests run it
// against the CPU model on every machine; nothing outside the tests links it.
#define DPG_DEVICE_HOST 1
#define DPG_DEVICE_NS host_backend
#include "runtime/model/cuda/device_mlp_impl.h"

namespace dpg::model {

std::unique_ptr<DeviceMlp> make_host_thrust_mlp(const MlpSpec& spec,
                                                std::span<const float> params) {
  return std::make_unique<host_backend::Impl>(spec, 0, params);
}

}  // namespace dpg::model
