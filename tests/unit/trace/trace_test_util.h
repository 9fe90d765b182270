// Helpers shared by the tracer's tests.
#pragma once

#include <atomic>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/core/trace.h"

namespace dpg::trace::testing {

// Allocations made by this process through the global operator new (test_trace.cc replaces it).
long long allocations();

// A fresh folder under the system's temporary folder, removed by the destructor.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static std::atomic<int> n{0};
    path = std::filesystem::temp_directory_path() /
           ("dpg_trace_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

inline nlohmann::json parse_file(const std::string& path) {
  return nlohmann::json::parse(read_trace_part(path));
}

}  // namespace dpg::trace::testing
