#include "runtime/data/io.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "runtime/core/error.h"

namespace dpg::data {
namespace {

// Closes the gzFile on every path out of read_file_bytes.
struct GzCloser {
  gzFile file;
  ~GzCloser() {
    if (file != nullptr) gzclose(file);
  }
};

}  // namespace

std::vector<unsigned char> read_file_bytes(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    fail(Code::not_found, path + ": no such file");
  }
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) fail(Code::not_found, path + ": cannot open file");
  GzCloser closer{file};
  gzbuffer(file, 1 << 18);

  // gzread reads plain files as they are, so one path serves both kinds.
  std::vector<unsigned char> bytes;
  constexpr std::size_t kChunk = std::size_t{1} << 22;
  for (;;) {
    const std::size_t old = bytes.size();
    bytes.resize(old + kChunk);
    const int got = gzread(file, bytes.data() + old, static_cast<unsigned>(kChunk));
    if (got < 0) {
      int errnum = 0;
      const char* what = gzerror(file, &errnum);
      fail(Code::data_loss, path + ": corrupt gzip data: " + std::string(what));
    }
    bytes.resize(old + static_cast<std::size_t>(got));
    if (got == 0) break;
  }
  int errnum = Z_OK;
  const char* what = gzerror(file, &errnum);
  if (errnum == Z_BUF_ERROR) {
    fail(Code::data_loss, path + ": truncated gzip file (" + std::string(what) + ")");
  }
  if (errnum != Z_OK) fail(Code::data_loss, path + ": read failed: " + std::string(what));
  return bytes;
}

std::uint32_t crc32_of(std::span<const unsigned char> bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const std::size_t n = std::min<std::size_t>(bytes.size() - done, std::size_t{1} << 30);
    crc = crc32(crc, bytes.data() + done, static_cast<uInt>(n));
    done += n;
  }
  return static_cast<std::uint32_t>(crc);
}

}  // namespace dpg::data
