#include "runtime/net/frame.h"

#include <cstring>

namespace dpg::net {
namespace {

template <typename T>
void put(HeaderBytes& b, std::size_t at, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    b[at + i] = static_cast<std::byte>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
  }
}

template <typename T>
T get(const HeaderBytes& b, std::size_t at) {
  uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<uint64_t>(std::to_integer<uint8_t>(b[at + i])) << (8 * i);
  }
  return static_cast<T>(v);
}

bool check_magic(const HeaderBytes& in, uint32_t magic, const char* what, std::string& why) {
  if (get<uint32_t>(in, 0) != magic) {
    why = std::string("not a dpgossip ") + what + " (bad magic)";
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

void encode_hello(const Hello& h, HeaderBytes& out) {
  out.fill(std::byte{0});
  put<uint32_t>(out, 0, kHelloMagic);
  put<uint16_t>(out, 4, kWireVersion);
  put<uint32_t>(out, 8, static_cast<uint32_t>(h.rank));
  put<uint32_t>(out, 12, static_cast<uint32_t>(h.world));
  put<uint64_t>(out, 16, h.config_hash);
}

std::optional<Hello> decode_hello(const HeaderBytes& in, std::string& why) {
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
}

std::optional<FrameHeader> decode_header(const HeaderBytes& in, std::string& why) {
  if (!check_magic(in, kFrameMagic, "frame", why)) return std::nullopt;
  FrameHeader h;
  uint16_t kind = get<uint16_t>(in, 6);
  if (kind < 1 || kind > 4) {
    why = "frame of unknown kind " + std::to_string(kind);
    return std::nullopt;
  }
  h.kind = static_cast<FrameKind>(kind);
  h.tag.op = get<uint32_t>(in, 8);
  h.tag.chunk = get<uint32_t>(in, 12);
  h.tag.round = get<uint64_t>(in, 16);
  h.length = get<uint64_t>(in, 24);
  return h;
}

}  // namespace dpg::net
