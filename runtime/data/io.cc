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

std::vector<unsigned char> read_file_bytes(const std::string& path, std::uint64_t max_bytes,
                                           const std::string& limit_reason) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    fail(Code::not_found, path + ": no such file");
  }
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) fail(Code::not_found, path + ": cannot open file");
  GzCloser closer{file};
  gzbuffer(file, 1 << 18);

  // gzread reads plain files as they are, so one path serves both kinds. The buffer grows with
  // what the stream yields (never from a count the file claims), and the read stops one byte
  // past max_bytes: a file that inflates further is refused before memory grows with it.
  std::vector<unsigned char> bytes;
  constexpr std::size_t kChunk = std::size_t{1} << 22;
  const std::uint64_t cap = max_bytes == UINT64_MAX ? UINT64_MAX : max_bytes + 1;
  for (;;) {
    const std::size_t old = bytes.size();
    if (old >= cap) break;
    const std::size_t want =
        static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, cap - old));
    bytes.resize(old + want);
    const int got = gzread(file, bytes.data() + old, static_cast<unsigned>(want));
    if (got < 0) {
      int errnum = 0;
      const char* what = gzerror(file, &errnum);
      fail(Code::data_loss, path + ": corrupt gzip data: " + std::string(what));
    }
    bytes.resize(old + static_cast<std::size_t>(got));
    if (got == 0) break;
  }
  if (bytes.size() > max_bytes) {
    fail(Code::data_loss, path + ": holds (or inflates to) more than the " +
                              std::to_string(max_bytes) + " bytes " +
                              (limit_reason.empty() ? "allowed" : limit_reason));
  }
  int errnum = Z_OK;
  const char* what = gzerror(file, &errnum);
  if (errnum == Z_BUF_ERROR) {
    fail(Code::data_loss, path + ": truncated gzip file (" + std::string(what) + ")");
  }
  if (errnum != Z_OK) fail(Code::data_loss, path + ": read failed: " + std::string(what));
  return bytes;
}

std::vector<unsigned char> read_file_prefix(const std::string& path, std::size_t n) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) fail(Code::not_found, path + ": no such file");
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) fail(Code::not_found, path + ": cannot open file");
  GzCloser closer{file};
  std::vector<unsigned char> bytes(n);
  std::size_t have = 0;
  while (have < n) {
    const int got = gzread(file, bytes.data() + have, static_cast<unsigned>(n - have));
    if (got < 0) {
      int errnum = 0;
      fail(Code::data_loss, path + ": corrupt gzip data: " + std::string(gzerror(file, &errnum)));
    }
    if (got == 0) break;
    have += static_cast<std::size_t>(got);
  }
  bytes.resize(have);
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
