#include "runtime/net/shaped_transport.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/error.h"
#include "runtime/core/hash.h"

namespace dpg::net {
namespace {

std::chrono::steady_clock::duration seconds_of(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

}  // namespace

ShapedTransport::ShapedTransport(Transport& inner, const NetworkShape& network) : inner_(inner) {
  const int me = inner_.rank();
  links_.resize(static_cast<std::size_t>(inner_.world()));
  for (int p = 0; p < inner_.world(); ++p) {
    const LinkShape s = network.between(me, p);
    if (p == me || !s.shaped()) continue;
    auto link = std::make_unique<Link>();
    link->shape = s;
    // One stream per directed link: the same draws whatever else the run does.
    const uint64_t words[3] = {network.seed, static_cast<uint64_t>(me), static_cast<uint64_t>(p)};
    link->rng.seed(fnv1a64(std::string_view(reinterpret_cast<const char*>(words), sizeof words)));
    links_[static_cast<std::size_t>(p)] = std::move(link);
  }
  serialiser_ = std::thread([this] { serialise_loop(); });
}

ShapedTransport::~ShapedTransport() {
  std::unique_lock lock(mu_);
  // What is on the links is delivered, as a network would after the sender is gone; bounded by
  // the timeout, after which the inner transport is failed so that its waits return.
  const auto deadline = Clock::now() + 2 * inner_.timeout();
  auto drained = [&] {
    return failure_ || std::all_of(links_.begin(), links_.end(), [](const auto& l) {
             return !l || (l->queued.empty() && l->in_flight.empty());
           });
  };
  if (!cv_.wait_until(lock, deadline, drained)) {
    fail_locked(Code::deadline_exceeded,
                rank_prefix(rank()) + "emulated links still held messages when the transport "
                                      "was closed");
  }
  stopping_ = true;
  cv_.notify_all();
  for (auto& l : links_) {
    if (l) l->cv.notify_all();
  }
  lock.unlock();
  serialiser_.join();
  for (auto& l : links_) {
    if (l && l->deliverer.joinable()) l->deliverer.join();
  }
}

LinkShape ShapedTransport::shape(int peer) const {
  if (peer < 0 || peer >= world() || !links_[static_cast<std::size_t>(peer)]) return {};
  return links_[static_cast<std::size_t>(peer)]->shape;
}

// An unshaped send and every receive go straight to the inner transport, which checks the peer
// and, once this transport has failed, throws its failure (fail_locked poisons it with the same).
Handle ShapedTransport::send(int peer, Tag tag, std::span<const std::byte> data) {
  if (peer < 0 || peer >= world() || !links_[static_cast<std::size_t>(peer)]) {
    const Handle h = inner_.send(peer, tag, data);
    if (h.slot & kShaped) fail(Code::internal, "a transport's handle uses the shaper's mark");
    return h;
  }
  std::lock_guard lock(mu_);
  if (failure_) rethrow_locked();
  Link& link = *links_[static_cast<std::size_t>(peer)];
  uint32_t slot = 0;
  if (free_.empty()) {
    slot = static_cast<uint32_t>(ops_.size());
    ops_.emplace_back();
  } else {
    slot = free_.back();
    free_.pop_back();
  }
  Op& op = ops_[slot];
  ++op.generation;
  op.live = true;
  op.done = false;
  op.peer = peer;
  op.tag = tag;
  op.posted = Clock::now();
  // The link is busy for the message's bits at its bandwidth, after the messages before it.
  Message m;
  m.slot = slot;
  m.peer = peer;
  m.tag = tag;
  m.data = data;
  const auto start = std::max(op.posted, link.next_free);
  m.ready = start;
  if (link.shape.bits_per_second > 0) {
    m.ready += seconds_of(static_cast<double>(data.size()) * 8 / link.shape.bits_per_second);
  }
  link.next_free = m.ready;
  link.queued.push_back(std::move(m));
  if (!link.deliverer.joinable()) link.deliverer = std::thread([this, peer] { deliver_loop(peer); });
  cv_.notify_all();
  return Handle{slot | kShaped, op.generation};
}

Handle ShapedTransport::recv(int peer, Tag tag, std::span<std::byte> data) {
  const Handle h = inner_.recv(peer, tag, data);
  if (h.slot & kShaped) fail(Code::internal, "a transport's handle uses the shaper's mark");
  return h;
}

void ShapedTransport::wait(Handle handle) {
  if (!(handle.slot & kShaped)) {
    try {
      inner_.wait(handle);
    } catch (const Error& e) {
      std::lock_guard lock(mu_);
      fail_locked(e.code(), e.what());
      throw;
    }
    return;
  }
  const uint32_t slot = handle.slot & ~kShaped;
  std::unique_lock lock(mu_);
  if (slot >= ops_.size() || !ops_[slot].live || ops_[slot].generation != handle.generation) {
    fail(Code::invalid_argument, rank_prefix(rank()) + "wait on a handle that is not posted");
  }
  const auto deadline = ops_[slot].posted + inner_.timeout();
  cv_.wait_until(lock, deadline, [&] { return ops_[slot].done || failure_.has_value(); });
  Op& op = ops_[slot];
  if (!op.done && !failure_) {
    fail_locked(Code::deadline_exceeded,
                rank_prefix(rank()) + "send to peer " + std::to_string(op.peer) + " (" +
                    to_string(op.tag) + ") did not leave its emulated link within " +
                    std::to_string(inner_.timeout().count()) + " ms");
  }
  if (!op.done) rethrow_locked();
  op.live = false;
  free_.push_back(slot);
}

void ShapedTransport::poison(Code code, const std::string& message) {
  std::lock_guard lock(mu_);
  fail_locked(code, message);
}

void ShapedTransport::fail_locked(Code code, const std::string& message) {
  if (!failure_) failure_.emplace(code, message);
  // Once the inner transport returns from poison no bytes move from a buffer posted there, so
  // the copies on the links may go; the caller's buffers were never posted there unserialised.
  inner_.poison(failure_->first, failure_->second);
  cv_.notify_all();
  for (auto& l : links_) {
    if (l) l->cv.notify_all();
  }
}

void ShapedTransport::rethrow_locked() const { throw Error(failure_->first, failure_->second); }

ShapedTransport::Clock::duration ShapedTransport::extra_delay(Link& link, std::size_t bytes) {
  const LinkShape& s = link.shape;
  double extra = 0;
  if (s.jitter.count() > 0) {
    std::normal_distribution<double> jitter(0, static_cast<double>(s.jitter.count()) * 1e-9);
    extra += jitter(link.rng);
  }
  if (s.loss > 0) {
    // Each lost segment is sent again after a round trip (a fast retransmit), and is serialised
    // again.
    const auto segments = static_cast<long long>((bytes + kSegmentBytes - 1) / kSegmentBytes);
    std::binomial_distribution<long long> lost(std::max(1LL, segments), s.loss);
    const long long n = lost(link.rng);
    const double resend = (s.bits_per_second > 0 ? kSegmentBytes * 8 / s.bits_per_second : 0);
    extra += static_cast<double>(n) *
             (2 * static_cast<double>(s.latency.count()) * 1e-9 + resend);
  }
  // The latency and the jitter together never make a message arrive before it was sent.
  const double total = std::max(0.0, static_cast<double>(s.latency.count()) * 1e-9 + extra);
  return seconds_of(total);
}

void ShapedTransport::serialise_loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (failure_) {
      for (auto& l : links_) {
        if (l) l->queued.clear();
      }
      cv_.wait(lock);
      continue;
    }
    // The earliest message whose last byte has left, among the links with room on the wire.
    Link* next = nullptr;
    for (auto& l : links_) {
      if (!l || l->queued.empty()) continue;
      const std::size_t bytes = l->queued.front().data.size();
      if (l->in_flight_bytes > 0 && l->in_flight_bytes + bytes > kShapedInFlightBytes) {
        l->waited_for_room = true;
        continue;
      }
      if (!next || l->queued.front().ready < next->queued.front().ready) next = l.get();
    }
    if (!next) {
      cv_.wait(lock);
      continue;
    }
    const auto now = Clock::now();
    if (now < next->queued.front().ready) {
      cv_.wait_until(lock, next->queued.front().ready);
      continue;
    }
    Message m = std::move(next->queued.front());
    next->queued.pop_front();
    // The copy is taken while the sender's wait has not returned, so its buffer is alive.
    m.copy.assign(m.data.begin(), m.data.end());
    m.data = {};
    Op& op = ops_[m.slot];
    op.done = true;
    // From when the message left (or, after waiting for room, from now) plus the latency.
    const auto left = next->waited_for_room ? std::max(m.ready, now) : m.ready;
    next->waited_for_room = false;
    m.arrival = std::max(left + extra_delay(*next, m.copy.size()), next->last_arrival);
    next->last_arrival = m.arrival;
    next->in_flight_bytes += m.copy.size();
    next->in_flight.push_back(std::move(m));
    next->cv.notify_all();
    cv_.notify_all();
  }
}

void ShapedTransport::deliver_loop(int peer) {
  Link& link = *links_[static_cast<std::size_t>(peer)];
  std::unique_lock lock(mu_);
  for (;;) {
    if (failure_) {
      link.in_flight_bytes = 0;
      link.in_flight.clear();  // the inner transport was poisoned: nothing reads these now
      cv_.notify_all();
      if (stopping_) return;
      link.cv.wait(lock);
      continue;
    }
    // Every message that has arrived goes to the inner transport, in order.
    const auto now = Clock::now();
    for (Message& m : link.in_flight) {
      if (m.posted) continue;
      if (m.arrival > now) break;
      try {
        m.inner = inner_.send(m.peer, m.tag, m.copy);
      } catch (const Error& e) {
        fail_locked(e.code(), e.what());
        break;
      }
      m.posted = true;
    }
    if (failure_) continue;
    if (!link.in_flight.empty() && link.in_flight.front().posted) {
      const Handle h = link.in_flight.front().inner;
      lock.unlock();
      std::optional<Error> error;
      try {
        inner_.wait(h);
      } catch (const Error& e) {
        error = e;
      }
      lock.lock();
      if (error) {
        fail_locked(error->code(), error->what());
        continue;
      }
      link.in_flight_bytes -= link.in_flight.front().copy.size();
      link.in_flight.pop_front();
      cv_.notify_all();
      continue;
    }
    if (link.in_flight.empty()) {
      if (stopping_) return;
      link.cv.wait(lock);
    } else {
      link.cv.wait_until(lock, link.in_flight.front().arrival);
    }
  }
}

}  // namespace dpg::net
