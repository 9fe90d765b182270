#include "runtime/net/routed_transport.h"

namespace dpg::net {

RoutedTransport::RoutedTransport(std::unique_ptr<Transport> first, std::unique_ptr<Transport> second,
                                 std::vector<int> route)
    : route_(std::move(route)) {
  parts_[0] = std::move(first);
  parts_[1] = std::move(second);
  const Transport* any = parts_[0] ? parts_[0].get() : parts_[1].get();
  if (!any) fail(Code::internal, "a routed transport needs at least one transport");
  rank_ = any->rank();
  world_ = any->world();
  timeout_ = any->timeout();
  for (const auto& p : parts_) {
    if (p && (p->rank() != rank_ || p->world() != world_ || p->timeout() != timeout_)) {
      fail(Code::internal, "a routed transport's parts disagree on rank, world or timeout");
    }
  }
  if (static_cast<int>(route_.size()) != world_) {
    fail(Code::internal, "a routed transport needs a route for each of the " +
                             std::to_string(world_) + " ranks");
  }
}

Transport& RoutedTransport::route(int peer, const char* what) {
  if (peer < 0 || peer >= world_ || peer == rank_ || route_[peer] < 0 || route_[peer] > 1 ||
      !parts_[route_[peer]]) {
    fail(Code::invalid_argument, rank_prefix(rank_) + what + " peer " +
                                     std::to_string(peer) + ": this peer has no connection to it");
  }
  return *parts_[route_[peer]];
}

void RoutedTransport::rethrow_first() const {
  std::lock_guard lock(mu_);
  if (first_failure_) throw *first_failure_;
}

Handle RoutedTransport::send(int peer, Tag tag, std::span<const std::byte> data) {
  rethrow_first();
  // A part that refuses the send fails itself; refusing() fails the other part too.
  Handle h = refusing(*this, [&] { return route(peer, "send to").send(peer, tag, data); });
  if (route_[peer] == 1) h.slot |= kSecond;
  return h;
}

Handle RoutedTransport::recv(int peer, Tag tag, std::span<std::byte> data) {
  rethrow_first();
  Handle h = refusing(*this, [&] { return route(peer, "receive from").recv(peer, tag, data); });
  if (route_[peer] == 1) h.slot |= kSecond;
  return h;
}

void RoutedTransport::wait(Handle handle) {
  rethrow_first();
  const int part = (handle.slot & kSecond) ? 1 : 0;
  handle.slot &= ~kSecond;
  if (!parts_[part]) fail(Code::internal, "a handle of a transport that carries nothing");
  try {
    parts_[part]->wait(handle);
  } catch (const Error& e) {
    // The other part too: its operations still posted must move no more bytes once the caller,
    // told of the failure, frees their buffers; and its peers learn of the failure at once.
    poison(e.code(), e.what());
    rethrow_first();
    throw;
  }
}

void RoutedTransport::poison(Code code, const std::string& message) {
  {
    std::lock_guard lock(mu_);
    if (!first_failure_) first_failure_.emplace(code, message);
  }
  // A part already failed keeps its own first failure (poison is a no-op there).
  for (auto& p : parts_) {
    if (p) p->poison(code, message);
  }
}

}  // namespace dpg::net
