// The wire format shared by every byte-stream transport. All integers are little-endian.
//
//   frame header (40 bytes), then `length` payload bytes:
//     magic "DPGM" | version u16 | kind u16 | op u32 | chunk u32 | round u64 | length u64 |
//     0 u32 | crc32 u32 (zlib's CRC-32 of the 36 bytes before it)
//   hello (32 bytes, the payload of a hello frame, once per connection, each way):
//     magic "DPGH" | version u16 | reserved u16 | rank u32 | world u32 | config_hash u64 | 0 u64
//
// A connection opens with a hello frame and a challenge frame each way, then, when the peers
// share a cluster secret, a proof frame each way (runtime/net/auth.h); after that come data frames
// for posted receives, abort (this peer's failure as text, at most kMaxAbortBytes, so that peers
// further away learn the root cause), bye (the sender has finished and will send nothing more, so
// that its closing the connection is not an error) and heartbeat (no payload: the sender's
// process is alive while it has nothing else to send).
//
// Every header is checked before anything it says is used: magic, version, checksum, a zero
// reserved field, a known kind, and a length within the kind's bound (exactly the size of a
// handshake message, 0 for bye and heartbeat, kMaxAbortBytes for abort, kMaxDataBytes for data,
// whose length the reader then compares with the posted receive before touching any memory).
// The checksum catches a stream that lost its place or a sender that is not dpgossip; it is no
// defence against a forger, which is what the secret and TLS are for (docs/SECURITY.md).
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
inline constexpr uint16_t kWireVersion = 3;
inline constexpr std::size_t kHeaderBytes = 40;
inline constexpr std::size_t kHelloBytes = 32;
inline constexpr std::size_t kChallengeBytes = 40;  // mode u32 | 0 u32 | nonce (32 bytes)
inline constexpr std::size_t kProofBytes = 32;      // HMAC-SHA256
inline constexpr std::size_t kMaxAbortBytes = 4096;
// The largest message a transport sends in one frame (1 TiB): far above any model, and a bound
// that a length field must stay under whatever receive is posted.
inline constexpr uint64_t kMaxDataBytes = uint64_t{1} << 40;

enum class FrameKind : uint16_t {
  data = 1,
  abort = 2,
  bye = 3,
  heartbeat = 4,
  hello = 5,
  challenge = 6,
  proof = 7,
};
const char* to_string(FrameKind kind);  // "data", "hello", ...

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
using HelloBytes = std::array<std::byte, kHelloBytes>;

void encode_hello(const Hello& h, HelloBytes& out);
// Empty when the bytes are not a hello of this wire version; `why` says what is wrong.
std::optional<Hello> decode_hello(const HelloBytes& in, std::string& why);

void encode_header(const FrameHeader& h, HeaderBytes& out);
// Empty when the header fails any check above; `why` says which.
std::optional<FrameHeader> decode_header(const HeaderBytes& in, std::string& why);

// The most payload bytes a frame of this kind may carry (the exact size for handshake kinds).
uint64_t max_length(FrameKind kind);

}  // namespace dpg::net
