#include "runtime/net/tracing_transport.h"

namespace dpg::net {

void TracingTransport::remember(Handle h, bool is_send, int peer, Tag tag, std::size_t bytes,
                                trace::Clock::time_point at) {
  std::lock_guard lk(mu_);
  if (h.slot >= posted_.size()) posted_.resize(std::max<std::size_t>(h.slot + 1, posted_.size() * 2));
  posted_[h.slot] = Posted{h.generation, true, is_send, peer, tag, bytes, at};
}

Handle TracingTransport::send(int peer, Tag tag, std::span<const std::byte> data) {
  if (!tracer_.on()) return inner_.send(peer, tag, data);
  const auto at = trace::Clock::now();
  const Handle h = inner_.send(peer, tag, data);
  remember(h, true, peer, tag, data.size(), at);
  return h;
}

Handle TracingTransport::recv(int peer, Tag tag, std::span<std::byte> data) {
  if (!tracer_.on()) return inner_.recv(peer, tag, data);
  const auto at = trace::Clock::now();
  const Handle h = inner_.recv(peer, tag, data);
  remember(h, false, peer, tag, data.size(), at);
  return h;
}

void TracingTransport::wait(Handle handle) {
  if (!tracer_.on()) {
    inner_.wait(handle);
    return;
  }
  Posted op;
  {
    std::lock_guard lk(mu_);
    if (handle.slot < posted_.size()) {
      Posted& p = posted_[handle.slot];
      if (p.live && p.generation == handle.generation) {
        op = p;
        p.live = false;
      }
    }
  }
  trace::Args args;
  if (op.live) {
    args.peer = op.peer;
    args.bytes = static_cast<long long>(op.bytes);
    args.op = op.tag.op;
    args.round = static_cast<long long>(op.tag.round);
    args.chunk = op.tag.chunk;
  }
  const auto begin = trace::Clock::now();
  try {
    inner_.wait(handle);
  } catch (...) {
    // The failed wait is on the timeline too; its error is the one that propagates.
    try {
      tracer_.complete("wait", "wait", begin, trace::Clock::now(), args);
    } catch (...) {
    }
    throw;
  }
  const auto end = trace::Clock::now();
  try {
    tracer_.complete("wait", "wait", begin, end, args);
    if (op.live) tracer_.complete(op.is_send ? "send" : "recv", "comm", op.at, end, args);
  } catch (const Error& e) {
    // A trace write failed: it fails the run, as a failed wait would. The caller, unwinding, may
    // leave operations posted: the transport is poisoned first (transport.h).
    inner_.poison(e.code(), rank_prefix(inner_.rank()) + e.what());
    throw;
  }
}

}  // namespace dpg::net
