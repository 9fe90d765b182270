#include "runtime/data/shard.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/core/bounds.h"
#include "runtime/core/check.h"
#include "runtime/core/error.h"
#include "runtime/core/json_io.h"
#include "runtime/data/io.h"

namespace dpg::data {
namespace {

std::string hex32(std::uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

void check_header(const std::string& path, const unsigned char* h, const ShardExpectation& e) {
  const auto magic = get_le<std::uint32_t>(h);
  const auto version = get_le<std::uint32_t>(h + 4);
  const auto rows = get_le<std::uint64_t>(h + 8);
  const auto cols = get_le<std::uint64_t>(h + 16);
  const auto classes = get_le<std::uint32_t>(h + 24);
  if (magic != kShardMagic) {
    fail(Code::data_loss,
         path + ": bad magic: expected " + hex32(kShardMagic) + ", got " + hex32(magic));
  }
  if (version != kShardVersion) {
    fail(Code::data_loss, path + ": unsupported shard version " + std::to_string(version) +
                              " (this build reads version " + std::to_string(kShardVersion) + ")");
  }
  if (rows != e.rows || cols != e.cols || classes != static_cast<std::uint32_t>(e.num_classes)) {
    fail(Code::data_loss, path + ": header says " + std::to_string(rows) + " rows x " +
                              std::to_string(cols) + " cols, " + std::to_string(classes) +
                              " classes; the manifest says " + std::to_string(e.rows) + " x " +
                              std::to_string(e.cols) + ", " + std::to_string(e.num_classes));
  }
}

}  // namespace

std::size_t shard_file_bytes(std::size_t rows, std::size_t cols) {
  return kShardHeaderBytes + rows * cols * sizeof(float) + rows * sizeof(std::int32_t);
}

std::vector<unsigned char> encode_shard(const Dataset& source,
                                        std::span<const std::size_t> indices) {
  const std::size_t rows = indices.size(), cols = source.cols;
  std::vector<unsigned char> out(shard_file_bytes(rows, cols));
  put_le(out.data(), kShardMagic);
  put_le(out.data() + 4, kShardVersion);
  put_le(out.data() + 8, static_cast<std::uint64_t>(rows));
  put_le(out.data() + 16, static_cast<std::uint64_t>(cols));
  put_le(out.data() + 24, static_cast<std::uint32_t>(source.num_classes));
  put_le(out.data() + 28, std::uint32_t{0});
  unsigned char* features = out.data() + kShardHeaderBytes;
  unsigned char* labels = features + rows * cols * sizeof(float);
  for (std::size_t i = 0; i < rows; ++i) {
    DPG_CHECK_LT(indices[i], source.rows);
    const std::span<const float> row(source.features.data() + indices[i] * cols, cols);
    put_le_array(features + i * cols * sizeof(float), row);
    put_le(labels + i * sizeof(std::int32_t), source.labels[indices[i]]);
  }
  return out;
}

Dataset read_shard(const std::string& path, const ShardExpectation& expect) {
  // The manifest's rows and cols come from outside: their product is checked before it is used,
  // and the file's size on disk is compared with it before a byte is read.
  const std::string field = "the shard size from the manifest's rows x cols";
  const std::uint64_t want = sum_or_fail(
      sum_or_fail(kShardHeaderBytes, product_or_fail({expect.rows, expect.cols, sizeof(float)}, path, field),
                  path, field),
      product_or_fail({expect.rows, sizeof(std::int32_t)}, path, field), path, field);
  {
    std::error_code ec;
    const auto on_disk = std::filesystem::file_size(path, ec);
    if (!ec && on_disk != want) {
      fail(Code::data_loss, path + ": " + std::to_string(on_disk) + " bytes, expected " +
                                std::to_string(want) + " (" + std::to_string(expect.rows) +
                                " rows x " + std::to_string(expect.cols) +
                                " cols): " + (on_disk < want ? "truncated" : "corrupted"));
    }
  }
  // A regular file only (not a FIFO or a device in its place), and no more than `want` bytes.
  const std::string text = read_regular_file(path, want, "a shard file");
  const std::span<const unsigned char> bytes(reinterpret_cast<const unsigned char*>(text.data()),
                                             text.size());
  if (bytes.size() != want) {
    fail(Code::data_loss, path + ": " + std::to_string(bytes.size()) + " bytes, expected " +
                              std::to_string(want) + " (" + std::to_string(expect.rows) +
                              " rows x " + std::to_string(expect.cols) +
                              " cols): " + (bytes.size() < want ? "truncated" : "corrupted"));
  }
  const std::uint32_t crc = crc32_of(bytes);
  if (crc != expect.crc32) {
    fail(Code::data_loss, path + ": checksum mismatch: crc32 " + hex32(crc) +
                              ", the manifest says " + hex32(expect.crc32) + " (corrupted file)");
  }
  check_header(path, bytes.data(), expect);

  Dataset d;
  d.rows = expect.rows;
  d.cols = expect.cols;
  d.num_classes = expect.num_classes;
  d.features.resize(d.rows * d.cols);
  d.labels.resize(d.rows);
  const unsigned char* features = bytes.data() + kShardHeaderBytes;
  get_le_array(features, std::span<float>(d.features));
  get_le_array(features + d.features.size() * sizeof(float), std::span<std::int32_t>(d.labels));
  for (std::size_t i = 0; i < d.rows; ++i) {
    if (d.labels[i] < 0 || d.labels[i] >= d.num_classes) {
      fail(Code::data_loss, path + ": label " + std::to_string(d.labels[i]) + " of row " +
                                std::to_string(i) + " is out of range (num_classes " +
                                std::to_string(d.num_classes) + ")");
    }
  }
  return d;
}

}  // namespace dpg::data
