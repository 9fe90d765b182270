#include "runtime/net/tracing_transport.h"

namespace dpg::net {

template <class Post>
Handle TracingTransport::post(bool is_send, int peer, Tag tag, std::size_t bytes, Post inner_post) {
  const auto at = trace::Clock::now();
  const bool step = counters_ != nullptr && !OffStepThread::here();
  if (step) counters_->posted();
  Handle h;
  try {
    h = inner_post();
  } catch (...) {
    if (step) counters_->done();
    throw;
  }
  std::lock_guard lk(mu_);
  if (h.slot >= posted_.size()) posted_.resize(std::max<std::size_t>(h.slot + 1, posted_.size() * 2));
  posted_[h.slot] = Posted{h.generation, true, is_send, step, peer, tag, bytes, at};
  return h;
}

Handle TracingTransport::send(int peer, Tag tag, std::span<const std::byte> data) {
  if (!active()) return inner_.send(peer, tag, data);
  return post(true, peer, tag, data.size(), [&] { return inner_.send(peer, tag, data); });
}

Handle TracingTransport::recv(int peer, Tag tag, std::span<std::byte> data) {
  if (!active()) return inner_.recv(peer, tag, data);
  return post(false, peer, tag, data.size(), [&] { return inner_.recv(peer, tag, data); });
}

void TracingTransport::wait(Handle handle) {
  if (!active()) {
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
  const bool training = counters_ != nullptr && counters_->training_thread();
  if (training) counters_->wait_begin(op.live ? op.peer : -1);
  const auto begin = trace::Clock::now();
  try {
    inner_.wait(handle);
  } catch (...) {
    if (training) counters_->wait_end();
    if (op.live && op.step) counters_->done();
    // The failed wait is on the timeline too; its error is the one that propagates.
    try {
      tracer_.complete("wait", "wait", begin, trace::Clock::now(), args);
    } catch (...) {
    }
    throw;
  }
  const auto end = trace::Clock::now();
  if (counters_ != nullptr) {
    if (training) counters_->wait_end();
    if (op.live && op.step) counters_->done();
    if (op.live) counters_->carried(op.peer, op.is_send, op.bytes);
  }
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
