// The binary shard file: a 32-byte little-endian header, then float32 features (rows, cols)
// row-major, then int32 labels (rows), all little-endian.
//
//   offset 0  uint32 magic 0x53475044 (the bytes "DPGS" on disk)
//          4  uint32 version (2)
//          8  uint64 rows
//         16  uint64 cols
//         24  uint32 num_classes
//         28  uint32 zlib's CRC-32 of everything after the header (features and labels)
//
// The checksum is in the shard, not in the manifest that every peer reads: it is a function of
// the shard's private rows, so it stays with the peer that holds them (docs/PRIVACY.md). The
// header's other fields are checked against the manifest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"

namespace dpg::data {

inline constexpr std::uint32_t kShardMagic = 0x53475044;
inline constexpr std::uint32_t kShardVersion = 2;
inline constexpr std::size_t kShardHeaderBytes = 32;

// Size in bytes of a shard file with this shape.
std::size_t shard_file_bytes(std::size_t rows, std::size_t cols);

// The file bytes for the rows `indices` of `source` (in that order).
std::vector<unsigned char> encode_shard(const Dataset& source,
                                        std::span<const std::size_t> indices);

// What the manifest says a shard file should be.
struct ShardExpectation {
  std::size_t rows = 0, cols = 0;
  int num_classes = 0;
};

// Reads and verifies a shard file (size, header, checksum, label range); every error names `path`.
// With `pick`, only those rows, in that order (each at most once; like select_rows on the whole
// shard, without ever holding it): the file is read in pieces and checked whole all the same.
Dataset read_shard(const std::string& path, const ShardExpectation& expect,
                   const std::vector<std::size_t>* pick = nullptr);

}  // namespace dpg::data
