// A Transport that records its traffic on a trace::Tracer: each send and receive as a span from
// its post to the return of its wait (name "send" / "recv", category "comm"), and each wait() as a
// span "wait" (category "wait") covering the time the caller was blocked. Args: peer, bytes, the
// tag's op / round / chunk, and the tracer's step. It decorates any Transport&, so algorithms see
// no difference. Given LinkCounters, it also counts each peer's bytes and the step's time in
// flight and blocked (link_counters.h), traced or not. With the tracer off and no counters every
// call is the inner call plus one branch; a caller that does neither does not wrap its transport.
#pragma once

#include <algorithm>
#include <chrono>
#include <mutex>
#include <vector>

#include "runtime/core/trace.h"
#include "runtime/net/link_counters.h"
#include "runtime/net/transport.h"

namespace dpg::net {

class TracingTransport final : public Transport {
 public:
  // Both must outlive this object.
  TracingTransport(Transport& inner, trace::Tracer& tracer, LinkCounters* counters = nullptr)
      : inner_(inner), tracer_(tracer), counters_(counters) {}

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
    bool step = false;  // counted in the counters' in-flight time
    int peer = 0;
    Tag tag;
    std::size_t bytes = 0;
    trace::Clock::time_point at;
  };
  bool active() const { return counters_ != nullptr || tracer_.on(); }
  // Posts through `inner_post` and remembers the operation for its wait.
  template <class Post>
  Handle post(bool is_send, int peer, Tag tag, std::size_t bytes, Post inner_post);

  Transport& inner_;
  trace::Tracer& tracer_;
  LinkCounters* counters_;
  std::mutex mu_;               // several threads may post and wait
  std::vector<Posted> posted_;  // indexed by Handle::slot; grows to the inner table's size once
};

}  // namespace dpg::net
