// device_backend() in dpgossip built with CUDA: the module dpgossip-cuda.so, loaded on the first
// call. It is looked for beside the program (the build tree, or a copy of both carried to another
// machine), then in the folder it is installed to (DPG_MODULE_DIR).
#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "apps/device_backend.h"
#include "runtime/core/error.h"

#ifndef DPG_MODULE_DIR
#error "DPG_MODULE_DIR: the folder the module is installed to"
#endif

namespace dpg::app {

namespace {

constexpr const char* kModule = "dpgossip-cuda.so";

// The folder of this program, from /proc/self/exe; empty when it cannot be read.
std::filesystem::path program_dir() {
  std::array<char, 4096> buf{};
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return {};
  return std::filesystem::path(std::string(buf.data(), static_cast<std::size_t>(n))).parent_path();
}

std::vector<std::filesystem::path> candidates() {
  std::vector<std::filesystem::path> out;
  if (auto dir = program_dir(); !dir.empty()) out.push_back(dir / kModule);
  out.push_back(std::filesystem::path(DPG_MODULE_DIR) / kModule);
  return out;
}

// The table, or the reason it could not be had.
const DeviceBackend* load(std::string& why) {
  for (const auto& path : candidates()) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      why += (why.empty() ? "" : "; ") + path.string() + " does not exist";
      continue;
    }
    // RTLD_NOW: a symbol the module needs and cannot find fails here, with its name, not at a
    // first call in the middle of a run. The module stays loaded for the process's life.
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* e = ::dlerror();
      why = "cannot load " + path.string() + ": " + (e != nullptr ? e : "unknown reason") +
            " (it needs the CUDA runtime, cuBLAS, cuRAND and NCCL libraries it was built with; "
            "docs/GPU.md)";
      return nullptr;
    }
    using Entry = const DeviceBackend* (*)(unsigned, std::size_t);
    auto entry = reinterpret_cast<Entry>(::dlsym(handle, "dpg_device_backend"));
    const DeviceBackend* table =
        entry != nullptr ? entry(kDeviceBackendVersion, sizeof(DeviceBackend)) : nullptr;
    if (table == nullptr) {
      why = path.string() + " is not the CUDA module of this build of dpgossip (" +
            (entry == nullptr ? "no entry point" : "another version") + "): rebuild both";
      return nullptr;
    }
    return table;
  }
  return nullptr;
}

}  // namespace

const DeviceBackend& device_backend(std::string_view asked_by) {
  static std::mutex m;
  static const DeviceBackend* table = nullptr;
  std::lock_guard<std::mutex> lock(m);
  if (table == nullptr) {
    std::string why;
    table = load(why);
    if (table == nullptr) fail(Code::unavailable, std::string(asked_by) + ": " + why);
  }
  return *table;
}

}  // namespace dpg::app
