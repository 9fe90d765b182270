// A build without the CUDA backend (meson's summary says so): asking for it is a clear error.
#include "runtime/core/error.h"
#include "runtime/model/device_mlp.h"

namespace dpg::model {

bool cuda_backend_built() { return false; }

int cuda_device_count(std::string* why) {
  if (why != nullptr) *why = "this build of dpgossip has no CUDA backend (meson found no CUDA toolkit)";
  return 0;
}

std::unique_ptr<DeviceMlp> make_cuda_mlp(const MlpSpec&, int device, std::span<const float>) {
  fail(Code::unavailable, "--device cuda:" + std::to_string(device) +
                              ": this build of dpgossip has no CUDA backend (configure with the "
                              "CUDA toolkit installed; meson's summary lists what is built)");
}

}  // namespace dpg::model
