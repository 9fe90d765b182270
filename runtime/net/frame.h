// The wire format shared by every byte-stream transport. All integers are little-endian.
//
//   hello (32 bytes, once per connection, each way):
//     magic "DPGH" | version u16 | reserved u16 | rank u32 | world u32 | config_hash u64 | 0 u64
//   frame header (32 bytes), then `length` payload bytes:
//     magic "DPGM" | version u16 | kind u16 | op u32 | chunk u32 | round u64 | length u64
//
// kind data carries a message for a posted receive; abort carries this peer's failure (text, at
// most kMaxAbortBytes) so that peers further away learn the root cause; bye says the sender has
// finished and will send nothing more, so that its closing the connection is not an error;
// heartbeat (no payload) says the sender's process is alive while it has nothing else to send.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "runtime/net/transport.h"

namespace dpg::net {

inline constexpr uint32_t kHelloMagic = 0x48475044;  // "DPGH"
inline constexpr uint32_t kFrameMagic = 0x4d475044;  // "DPGM"
inline constexpr uint16_t kWireVersion = 2;
inline constexpr std::size_t kHeaderBytes = 32;
inline constexpr std::size_t kMaxAbortBytes = 4096;

enum class FrameKind : uint16_t { data = 1, abort = 2, bye = 3, heartbeat = 4 };

struct Hello {
  int rank = 0;
  int world = 0;
  uint64_t config_hash = 0;
};

struct FrameHeader {
  FrameKind kind = FrameKind::data;
  Tag tag;
  uint64_t length = 0;
};

using HeaderBytes = std::array<std::byte, kHeaderBytes>;

void encode_hello(const Hello& h, HeaderBytes& out);
// Empty when the bytes are not a hello of this wire version; `why` says what is wrong.
std::optional<Hello> decode_hello(const HeaderBytes& in, std::string& why);

void encode_header(const FrameHeader& h, HeaderBytes& out);
std::optional<FrameHeader> decode_header(const HeaderBytes& in, std::string& why);

}  // namespace dpg::net
