// The entry point of the module dpgossip-cuda.so (device_backend.h): the linked table, for a
// loader of the same version. The version script (device_module.map) exports this symbol alone,
// so the module's own definitions bind inside it and never to the program's.
#include "apps/device_backend.h"

extern "C" const dpg::app::DeviceBackend* dpg_device_backend(unsigned version,
                                                             std::size_t table_size) {
  if (version != dpg::app::kDeviceBackendVersion || table_size != sizeof(dpg::app::DeviceBackend)) {
    return nullptr;
  }
  return &dpg::app::linked_device_backend();
}
