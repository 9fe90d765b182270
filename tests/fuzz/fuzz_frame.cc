// The wire decoders: the input's first 40 bytes as a frame header, the next 32 as a hello, the
// next 40 as a challenge (runtime/net/frame.h, auth.h). A decoded value must encode back to bytes
// that decode to the same value (the reserved fields aside), and a refusal must say why.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/net/auth.h"
#include "runtime/net/frame.h"
#include "tests/fuzz/fuzz_util.h"

using namespace dpg::net;

namespace {

void header(const HeaderBytes& bytes) {
  std::string why;
  if (const auto h = decode_header(bytes, why)) {
    if (h->length > max_length(h->kind)) std::abort();  // a length past its kind's bound
    HeaderBytes again;
    encode_header(*h, again);
    if (again != bytes) std::abort();  // every checked field round-trips, the checksum too
  } else if (why.empty()) {
    std::abort();
  }
}

void hello(const HelloBytes& bytes) {
  std::string why;
  if (const auto h = decode_hello(bytes, why)) {
    HelloBytes again;
    encode_hello(*h, again);
    std::string why2;
    const auto h2 = decode_hello(again, why2);
    if (!h2 || h2->rank != h->rank || h2->world != h->world || h2->config_hash != h->config_hash) {
      std::abort();
    }
  } else if (why.empty()) {
    std::abort();
  }
}

void challenge(const ChallengeBytes& bytes) {
  std::string why;
  if (const auto c = decode_challenge(bytes, why)) {
    ChallengeBytes again;
    encode_challenge(*c, again);
    if (again != bytes) std::abort();
  } else if (why.empty()) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return dpg::fuzz::run([&] {
    if (size >= kHeaderBytes) {
      HeaderBytes b;
      std::memcpy(b.data(), data, kHeaderBytes);
      header(b);
    }
    if (size >= kHeaderBytes + kHelloBytes) {
      HelloBytes b;
      std::memcpy(b.data(), data + kHeaderBytes, kHelloBytes);
      hello(b);
    }
    if (size >= kHeaderBytes + kHelloBytes + kChallengeBytes) {
      ChallengeBytes b;
      std::memcpy(b.data(), data + kHeaderBytes + kHelloBytes, kChallengeBytes);
      challenge(b);
    }
  });
}
