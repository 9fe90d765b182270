// A Transport that records its traffic on a trace::Tracer: each send and receive as a span from
// its post to the return of its wait (name "send" / "recv", category "comm"), and each wait() as a
// span "wait" (category "wait") covering the time the caller was blocked. Args: peer, bytes, the
// tag's op / round / chunk, and the tracer's step. It decorates any Transport&, so algorithms see
// no difference. With the tracer off every call is the inner call plus one branch; a caller that
// never traces simply does not wrap its transport.
#pragma once

#include <algorithm>
#include <chrono>
#include <mutex>
#include <vector>

#include "runtime/core/trace.h"
#include "runtime/net/transport.h"

namespace dpg::net {

class TracingTransport final : public Transport {
 public:
  // Both must outlive this object.
  TracingTransport(Transport& inner, trace::Tracer& tracer) : inner_(inner), tracer_(tracer) {}

  int rank() const override { return inner_.rank(); }
  int world() const override { return inner_.world(); }
  Handle send(int peer, Tag tag, std::span<const std::byte> data) override;
  Handle recv(int peer, Tag tag, std::span<std::byte> data) override;
  void wait(Handle handle) override;
  std::chrono::milliseconds timeout() const override { return inner_.timeout(); }
  void poison(Code code, const std::string& message) override { inner_.poison(code, message); }

  Transport& inner() { return inner_; }

 private:
  // What was posted in one slot of the inner transport; `generation` tells a stale entry.
  struct Posted {
    uint32_t generation = 0;
    bool live = false;
    bool is_send = false;
    int peer = 0;
    Tag tag;
    std::size_t bytes = 0;
    trace::Clock::time_point at;
  };
  void remember(Handle h, bool is_send, int peer, Tag tag, std::size_t bytes,
                trace::Clock::time_point at);

  Transport& inner_;
  trace::Tracer& tracer_;
  std::mutex mu_;               // several threads may post and wait
  std::vector<Posted> posted_;  // indexed by Handle::slot; grows to the inner table's size once
};

}  // namespace dpg::net
