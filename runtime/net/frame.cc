#include "runtime/net/frame.h"

#include <zlib.h>

#include <cstring>

namespace dpg::net {
namespace {

template <typename T, std::size_t N>
void put(std::array<std::byte, N>& b, std::size_t at, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    b[at + i] = static_cast<std::byte>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
  }
}

template <typename T, std::size_t N>
T get(const std::array<std::byte, N>& b, std::size_t at) {
  uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<uint64_t>(std::to_integer<uint8_t>(b[at + i])) << (8 * i);
  }
  return static_cast<T>(v);
}

constexpr std::size_t kCrcAt = kHeaderBytes - 4;

uint32_t header_crc(const HeaderBytes& b) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(b.data()), static_cast<uInt>(kCrcAt)));
}

// A TLS record starts with content type 22 (handshake) and major version 3.
bool looks_like_tls(const std::byte* b) {
  return std::to_integer<uint8_t>(b[0]) == 0x16 && std::to_integer<uint8_t>(b[1]) == 0x03;
}

template <std::size_t N>
bool check_magic(const std::array<std::byte, N>& in, uint32_t magic, const char* what,
                 std::string& why) {
  if (get<uint32_t>(in, 0) != magic) {
    why = std::string("not a dpgossip ") + what + " (bad magic)";
    if (looks_like_tls(in.data())) {
      why += "; it looks like the start of a TLS handshake: is the sender using --tls and this "
             "peer not?";
    }
    return false;
  }
  if (get<uint16_t>(in, 4) != kWireVersion) {
    why = std::string(what) + " of wire version " + std::to_string(get<uint16_t>(in, 4)) +
          ", this build speaks " + std::to_string(kWireVersion);
    return false;
  }
  return true;
}

}  // namespace

const char* to_string(FrameKind kind) {
  switch (kind) {
    case FrameKind::data: return "data";
    case FrameKind::abort: return "abort";
    case FrameKind::bye: return "bye";
    case FrameKind::heartbeat: return "heartbeat";
    case FrameKind::hello: return "hello";
    case FrameKind::challenge: return "challenge";
    case FrameKind::proof: return "proof";
  }
  return "unknown";
}

uint64_t max_length(FrameKind kind) {
  switch (kind) {
    case FrameKind::data: return kMaxDataBytes;
    case FrameKind::abort: return kMaxAbortBytes;
    case FrameKind::bye:
    case FrameKind::heartbeat: return 0;
    case FrameKind::hello: return kHelloBytes;
    case FrameKind::challenge: return kChallengeBytes;
    case FrameKind::proof: return kProofBytes;
  }
  return 0;
}

void encode_hello(const Hello& h, HelloBytes& out) {
  out.fill(std::byte{0});
  put<uint32_t>(out, 0, kHelloMagic);
  put<uint16_t>(out, 4, kWireVersion);
  put<uint32_t>(out, 8, static_cast<uint32_t>(h.rank));
  put<uint32_t>(out, 12, static_cast<uint32_t>(h.world));
  put<uint64_t>(out, 16, h.config_hash);
}

std::optional<Hello> decode_hello(const HelloBytes& in, std::string& why) {
  if (!check_magic(in, kHelloMagic, "hello", why)) return std::nullopt;
  Hello h;
  h.rank = static_cast<int>(get<uint32_t>(in, 8));
  h.world = static_cast<int>(get<uint32_t>(in, 12));
  h.config_hash = get<uint64_t>(in, 16);
  return h;
}

void encode_header(const FrameHeader& h, HeaderBytes& out) {
  put<uint32_t>(out, 0, kFrameMagic);
  put<uint16_t>(out, 4, kWireVersion);
  put<uint16_t>(out, 6, static_cast<uint16_t>(h.kind));
  put<uint32_t>(out, 8, h.tag.op);
  put<uint32_t>(out, 12, h.tag.chunk);
  put<uint64_t>(out, 16, h.tag.round);
  put<uint64_t>(out, 24, h.length);
  put<uint32_t>(out, 32, 0);
  put<uint32_t>(out, kCrcAt, header_crc(out));
}

std::optional<FrameHeader> decode_header(const HeaderBytes& in, std::string& why) {
  if (!check_magic(in, kFrameMagic, "frame", why)) return std::nullopt;
  if (get<uint32_t>(in, kCrcAt) != header_crc(in)) {
    why = "frame header checksum mismatch (the stream is corrupt or out of step)";
    return std::nullopt;
  }
  if (get<uint32_t>(in, 32) != 0) {
    why = "frame header with a non-zero reserved field";
    return std::nullopt;
  }
  const uint16_t kind = get<uint16_t>(in, 6);
  if (kind < 1 || kind > 7) {
    why = "frame of unknown kind " + std::to_string(kind);
    return std::nullopt;
  }
  FrameHeader h;
  h.kind = static_cast<FrameKind>(kind);
  h.tag.op = get<uint32_t>(in, 8);
  h.tag.chunk = get<uint32_t>(in, 12);
  h.tag.round = get<uint64_t>(in, 16);
  h.length = get<uint64_t>(in, 24);
  const uint64_t most = max_length(h.kind);
  const bool fixed = h.kind == FrameKind::hello || h.kind == FrameKind::challenge ||
                     h.kind == FrameKind::proof;
  if (fixed ? h.length != most : h.length > most) {
    why = std::string(to_string(h.kind)) + " frame of " + std::to_string(h.length) +
          " bytes; a " + to_string(h.kind) + " frame has " + (fixed ? "exactly " : "at most ") +
          std::to_string(most);
    return std::nullopt;
  }
  return h;
}

}  // namespace dpg::net
