// Shared by the libFuzzer targets: a dpg::Error is the parser refusing bad input, a normal
// outcome; anything else (another exception, a crash, a sanitizer report, an allocation past
// -malloc_limit_mb) is a finding. Readers that only take a path get the input through a file in a
// private temporary folder, rewritten on every run.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/core/error.h"

namespace dpg::fuzz {

// Runs `body`; swallows dpg::Error, lets everything else escape (libFuzzer reports it).
template <typename F>
int run(F&& body) {
  try {
    body();
  } catch (const dpg::Error&) {
  }
  return 0;
}

// A folder of this process, removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dpg-fuzz-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    static const std::string keep = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return std::filesystem::path(tmpl);
  }();
  return dir;
}

// Writes `size` bytes to `name` in the scratch folder and returns its path.
inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = (scratch_dir() / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    std::perror(path.c_str());
    std::abort();
  }
  return path;
}

}  // namespace dpg::fuzz
