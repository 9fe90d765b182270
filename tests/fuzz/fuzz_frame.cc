// The wire decoder: 32 bytes as a frame header and as a hello. A decoded value must encode back
// to bytes that decode to the same value (the reserved fields aside).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/net/frame.h"
#include "tests/fuzz/fuzz_util.h"

using namespace dpg::net;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kHeaderBytes) return 0;
  HeaderBytes bytes;
  std::memcpy(bytes.data(), data, kHeaderBytes);
  return dpg::fuzz::run([&] {
    std::string why;
    if (const auto h = decode_header(bytes, why)) {
      HeaderBytes again;
      encode_header(*h, again);
      std::string why2;
      const auto h2 = decode_header(again, why2);
      if (!h2 || h2->kind != h->kind || h2->tag.op != h->tag.op || h2->tag.chunk != h->tag.chunk ||
          h2->tag.round != h->tag.round || h2->length != h->length) {
        std::abort();
      }
    } else if (why.empty()) {
      std::abort();  // a refusal always says why
    }
    why.clear();
    if (const auto h = decode_hello(bytes, why)) {
      HeaderBytes again;
      encode_hello(*h, again);
      std::string why2;
      const auto h2 = decode_hello(again, why2);
      if (!h2 || h2->rank != h->rank || h2->world != h->world ||
          h2->config_hash != h->config_hash) {
        std::abort();
      }
    } else if (why.empty()) {
      std::abort();
    }
  });
}
