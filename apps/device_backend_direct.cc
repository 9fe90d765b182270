// device_backend() where the program links the CUDA code (or the factories that say the build
// has none) itself: a build without CUDA, and unit tests.
#include "apps/device_backend.h"

namespace dpg::app {

const DeviceBackend& device_backend(std::string_view) { return linked_device_backend(); }

}  // namespace dpg::app
