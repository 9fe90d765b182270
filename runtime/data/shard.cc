#include "runtime/data/shard.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <zlib.h>

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

// Checks the header against the manifest's expectation; returns the checksum it carries.
std::uint32_t check_header(const std::string& path, const unsigned char* h,
                           const ShardExpectation& e) {
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
  return get_le<std::uint32_t>(h + 28);
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
  unsigned char* features = out.data() + kShardHeaderBytes;
  unsigned char* labels = features + rows * cols * sizeof(float);
  for (std::size_t i = 0; i < rows; ++i) {
    DPG_CHECK_LT(indices[i], source.rows);
    const std::span<const float> row(source.features.data() + indices[i] * cols, cols);
    put_le_array(features + i * cols * sizeof(float), row);
    put_le(labels + i * sizeof(std::int32_t), source.labels[indices[i]]);
  }
  put_le(out.data() + 28, crc32_of(std::span<const unsigned char>(out).subspan(kShardHeaderBytes)));
  return out;
}

Dataset read_shard(const std::string& path, const ShardExpectation& expect,
                   const std::vector<std::size_t>* pick) {
  // The manifest's rows and cols come from outside: their product is checked before it is used,
  // and the file's size on disk is compared with it before a byte is read.
  const std::string field = "the shard size from the manifest's rows x cols";
  const std::uint64_t want = sum_or_fail(
      sum_or_fail(kShardHeaderBytes, product_or_fail({expect.rows, expect.cols, sizeof(float)}, path, field),
                  path, field),
      product_or_fail({expect.rows, sizeof(std::int32_t)}, path, field), path, field);
  const auto wrong_size = [&](std::uint64_t have) {
    fail(Code::data_loss, path + ": " + std::to_string(have) + " bytes, expected " +
                              std::to_string(want) + " (" + std::to_string(expect.rows) +
                              " rows x " + std::to_string(expect.cols) +
                              " cols): " + (have < want ? "truncated" : "corrupted"));
  };
  {
    std::error_code ec;
    const auto on_disk = std::filesystem::file_size(path, ec);
    if (ec) {
      // Missing, or not a regular file (a FIFO, a folder): read_regular_file_chunks says which,
      // before anything the manifest sizes is allocated.
      read_regular_file_chunks(path, 0, "a shard file", [](std::string_view) {});
      fail(Code::not_found, path + ": cannot read its size: " + ec.message());
    }
    if (on_disk != want) wrong_size(on_disk);
  }
  // Where each row of the file goes in the result (npos: not kept), when only some are kept.
  constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::vector<std::size_t> slot;
  if (pick != nullptr) {
    slot.assign(expect.rows, npos);
    for (std::size_t i = 0; i < pick->size(); ++i) {
      DPG_CHECK_LT((*pick)[i], expect.rows);
      DPG_CHECK(slot[(*pick)[i]] == npos);  // each row at most once
      slot[(*pick)[i]] = i;
    }
  }
  Dataset d;
  d.rows = pick != nullptr ? pick->size() : expect.rows;
  d.cols = expect.cols;
  d.num_classes = expect.num_classes;
  d.features.resize(d.rows * d.cols);
  std::vector<std::int32_t> labels(expect.rows);  // every row's, checked below; kept ones copied
  // The file goes by in pieces (read_regular_file_chunks): the header, then each row's features,
  // then the labels, each gathered in `part` until whole; a kept row is decoded into its slot.
  // So the file is never held whole, and what stays is what the peer keeps.
  const std::size_t row_bytes = d.cols * sizeof(float);
  std::vector<unsigned char> part;
  part.reserve(std::max<std::size_t>(kShardHeaderBytes, row_bytes));
  std::uint64_t seen = 0;  // bytes of the file so far
  uLong crc = crc32(0L, Z_NULL, 0);  // of the bytes after the header
  std::uint32_t header_crc = 0;
  bool header_done = false;
  std::size_t row = 0;    // the feature row being gathered
  std::size_t label = 0;  // then the label
  const auto need = [&]() -> std::size_t {
    if (!header_done) return kShardHeaderBytes;
    return row < expect.rows ? row_bytes : sizeof(std::int32_t);
  };
  read_regular_file_chunks(path, want, "a shard file", [&](std::string_view piece) {
    const auto* p = reinterpret_cast<const unsigned char*>(piece.data());
    std::size_t left = piece.size();
    if (seen + left > want) wrong_size(seen + left);
    while (left > 0) {
      const std::size_t n = std::min(left, need() - part.size());
      if (header_done) crc = crc32(crc, p, static_cast<uInt>(n));
      part.insert(part.end(), p, p + n);
      p += n;
      left -= n;
      seen += n;
      if (part.size() < need()) break;
      if (!header_done) {
        header_done = true;
        header_crc = check_header(path, part.data(), expect);
      } else if (row < expect.rows) {
        const std::size_t to = pick != nullptr ? slot[row] : row;
        if (to != npos) {
          get_le_array(part.data(), std::span<float>(d.features.data() + to * d.cols, d.cols));
        }
        ++row;
      } else {
        labels[label++] = get_le<std::int32_t>(part.data());
      }
      part.clear();
    }
  });
  if (seen != want) wrong_size(seen);
  if (crc != header_crc) {
    fail(Code::data_loss, path + ": checksum mismatch: crc32 " + hex32(static_cast<std::uint32_t>(crc)) +
                              ", its header says " + hex32(header_crc) + " (corrupted file)");
  }
  d.labels.resize(d.rows);
  for (std::size_t i = 0; i < expect.rows; ++i) {
    if (labels[i] < 0 || labels[i] >= d.num_classes) {
      fail(Code::data_loss, path + ": label " + std::to_string(labels[i]) + " of row " +
                                std::to_string(i) + " is out of range (num_classes " +
                                std::to_string(d.num_classes) + ")");
    }
    const std::size_t to = pick != nullptr ? slot[i] : i;
    if (to != npos) d.labels[to] = labels[i];
  }
  return d;
}

}  // namespace dpg::data
