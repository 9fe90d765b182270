// Byte-level helpers of the data room: whole-file reads (gzip or plain, through zlib), CRC-32,
// and little-endian encoding that does not depend on the host's byte order.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace dpg::data {

// The whole (decompressed) content of a gzip or plain file. Throws not_found when the file is
// missing or unreadable, data_loss when a gzip stream is corrupt or ends early.
// At most `max_bytes` (decompressed) are read: the read stops one byte past them and a file that
// holds (or inflates to) more throws data_loss "<path>: ... more than N bytes <limit_reason>".
std::vector<unsigned char> read_file_bytes(const std::string& path,
                                           std::uint64_t max_bytes = UINT64_MAX,
                                           const std::string& limit_reason = "");

// The first `n` (decompressed) bytes of a file, fewer when it is shorter: a header, read before
// the header's sizes decide how much of the rest to read.
std::vector<unsigned char> read_file_prefix(const std::string& path, std::size_t n);

// zlib's CRC-32 of a byte range (any length).
std::uint32_t crc32_of(std::span<const unsigned char> bytes);

template <typename T>
void put_le(unsigned char* out, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  const U u = std::bit_cast<U>(value);
  for (std::size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<unsigned char>(u >> (8 * i));
}

template <typename T>
T get_le(const unsigned char* in) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  U u = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) u |= static_cast<U>(in[i]) << (8 * i);
  return std::bit_cast<T>(u);
}

// Bulk copies of 4-byte values to and from little-endian bytes: memcpy on little-endian hosts.
template <typename T>
void put_le_array(unsigned char* out, std::span<const T> values) {
  static_assert(sizeof(T) == 4);
  if constexpr (std::endian::native == std::endian::little) {
    if (!values.empty()) std::memcpy(out, values.data(), values.size_bytes());
  } else {
    for (std::size_t i = 0; i < values.size(); ++i) put_le(out + 4 * i, values[i]);
  }
}

template <typename T>
void get_le_array(const unsigned char* in, std::span<T> values) {
  static_assert(sizeof(T) == 4);
  if constexpr (std::endian::native == std::endian::little) {
    if (!values.empty()) std::memcpy(values.data(), in, values.size_bytes());
  } else {
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = get_le<T>(in + 4 * i);
  }
}

// Reads a 32-bit big-endian value (the IDX header's byte order).
inline std::uint32_t get_be32(const unsigned char* in) {
  return (std::uint32_t{in[0]} << 24) | (std::uint32_t{in[1]} << 16) | (std::uint32_t{in[2]} << 8) |
         std::uint32_t{in[3]};
}

}  // namespace dpg::data
