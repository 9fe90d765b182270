// The CUDA instance of the device MLP (device_mlp.h): cuBLAS, Thrust's CUDA backend, cuRAND.
#define DPG_DEVICE_CUDA 1
#define DPG_DEVICE_NS cuda_backend
#include "runtime/model/cuda/device_mlp_impl.h"

namespace dpg::model {

bool cuda_backend_built() { return true; }

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it, so that no later call reports it as its own
    if (why != nullptr) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "cudaGetDeviceCount: no CUDA device";
  return n;
}

std::unique_ptr<DeviceMlp> make_cuda_mlp(const MlpSpec& spec, int device,
                                         std::span<const float> params) {
  std::string why;
  const int n = cuda_device_count(&why);
  if (device < 0 || device >= n) {
    fail(Code::unavailable, "--device cuda:" + std::to_string(device) + ": " +
                                (n == 0 ? why : "this machine has " + std::to_string(n) +
                                                    " CUDA devices, numbered from 0"));
  }
  return std::make_unique<cuda_backend::Impl>(spec, device, params);
}

}  // namespace dpg::model
