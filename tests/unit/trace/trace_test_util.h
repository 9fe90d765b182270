// Helpers shared by the tracer's tests.
#pragma once

#include <atomic>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>

#include <filesystem>
#include <stdexcept>
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

// While it lives, the kernel refuses this process's writes past `bytes` of a file with EFBIG
// (SIGXFSZ ignored), so that a trace write fails mid-run; the old limit is put back after.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    std::signal(SIGXFSZ, SIG_IGN);
    if (getrlimit(RLIMIT_FSIZE, &old_) != 0) throw std::runtime_error("getrlimit failed");
    rlimit small = old_;
    small.rlim_cur = bytes;
    if (setrlimit(RLIMIT_FSIZE, &small) != 0) throw std::runtime_error("setrlimit failed");
  }
  ~FileSizeLimit() { setrlimit(RLIMIT_FSIZE, &old_); }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit old_{};
};

inline nlohmann::json parse_file(const std::string& path) {
  return nlohmann::json::parse(read_trace_part(path));
}

}  // namespace dpg::trace::testing
