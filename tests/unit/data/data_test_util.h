// Helpers for the data room's tests: a private temporary folder and writers of small IDX / CSV
// files, so that every test builds exactly the input it needs.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/core/error.h"

namespace dpg::data::testing {

namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;

class TempFolder {
 public:
  explicit TempFolder(const std::string& name)
      : path_(fs::temp_directory_path() /
              ("dpg_test_data_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempFolder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

inline void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

inline void write_text(const std::string& path, const std::string& text) {
  write_bytes(path, Bytes(text.begin(), text.end()));
}

inline void write_gz(const std::string& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

inline Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void put_be32(Bytes& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<unsigned char>(v >> s));
}

// IDX images: n images of rows x cols, pixel(i, p) for image i and pixel p.
template <typename F>
Bytes idx_images(std::uint32_t n, std::uint32_t rows, std::uint32_t cols, F pixel) {
  Bytes b;
  put_be32(b, 0x00000803);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (std::uint32_t i = 0; i < n; ++i) {
    for (std::uint32_t p = 0; p < rows * cols; ++p)
      b.push_back(static_cast<unsigned char>(pixel(i, p)));
  }
  return b;
}

inline Bytes idx_labels(const std::vector<int>& labels) {
  Bytes b;
  put_be32(b, 0x00000801);
  put_be32(b, static_cast<std::uint32_t>(labels.size()));
  for (int l : labels) b.push_back(static_cast<unsigned char>(l));
  return b;
}

// The message of the dpg::Error that f throws (a test failure if it throws none), and its code.
template <typename F>
std::string error_of(F f, Code* code = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (code != nullptr) *code = e.code();
    return e.what();
  }
  FAIL("expected a dpg::Error");
  return {};
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace dpg::data::testing
