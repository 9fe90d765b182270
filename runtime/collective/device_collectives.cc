#include "runtime/collective/device_collectives.h"

#include <algorithm>
#include <exception>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/net/ops.h"

namespace dpg::collective {

HostMemoryCollectives::~HostMemoryCollectives() {
  // An exchange still in flight (the caller threw between the halves) is waited for, so that no
  // receive lands in a buffer freed after this; each wait ends by the transport's deadline, at
  // once after a failure, and a failed one leaves the rest still to wait for.
  while (in_flight()) {
    try {
      finish_exchange();
    } catch (const std::exception&) {
      // The failure is the transport's; whoever uses it next is told.
    }
  }
}

void HostMemoryCollectives::allreduce(float* data, std::size_t count, Reduce op) {
  finish_exchange();
  comm_.allreduce(device_memory(std::span<float>(data, count)), op);
}

void HostMemoryCollectives::finish_exchange() {
  net::Transport& t = comm_.transport();
  // Each handle leaves the list once waited on, so that after a failed wait the destructor still
  // waits for the rest.
  while (!in_flight_.empty()) {
    const net::Handle h = in_flight_.front();
    in_flight_.erase(in_flight_.begin());
    t.wait(h);
  }
}

void HostMemoryCollectives::start_exchange(std::span<const DeviceSend> sends,
                                           std::span<const DeviceRecv> recvs) {
  finish_exchange();
  net::Transport& t = comm_.transport();
  const std::uint64_t round = calls_++;
  // The k-th buffer between two ranks is chunk k of the tag, on both sides alike.
  std::vector<std::uint32_t> sent(static_cast<std::size_t>(t.world()), 0);
  std::vector<std::uint32_t> received(static_cast<std::size_t>(t.world()), 0);
  auto check_peer = [&](int peer, const char* kind) {
    if (peer < 0 || peer >= t.world()) {
      fail(Code::invalid_argument, rank_prefix(t.rank()) + "exchange: " + kind +
                                       " peer " + std::to_string(peer) + " in a world of " +
                                       std::to_string(t.world()));
    }
  };
  for (const auto& r : recvs) check_peer(r.peer, "receive");
  for (const auto& s : sends) check_peer(s.peer, "send");
  // To itself: the k-th send to self lands in the k-th receive from self (the transport has no
  // messages to self).
  std::vector<const DeviceSend*> to_self;
  for (const auto& s : sends) {
    if (s.peer == t.rank()) to_self.push_back(&s);
  }
  std::size_t self_k = 0;
  for (const auto& r : recvs) {
    if (r.peer != t.rank()) continue;
    if (self_k >= to_self.size() || to_self[self_k]->count != r.count) {
      fail(Code::invalid_argument, rank_prefix(t.rank()) +
                                       "exchange: receive " + std::to_string(self_k) +
                                       " from itself has no send of its size");
    }
    std::copy_n(to_self[self_k++]->data, r.count, r.data);
  }
  for (const auto& r : recvs) {
    if (r.peer == t.rank()) continue;
    const net::Tag tag{net::kOpDeviceExchange, round, received[r.peer]++};
    in_flight_.push_back(t.recv(r.peer, tag, std::as_writable_bytes(std::span(r.data, r.count))));
  }
  for (const auto& s : sends) {
    if (s.peer == t.rank()) continue;
    const net::Tag tag{net::kOpDeviceExchange, round, sent[s.peer]++};
    in_flight_.push_back(t.send(s.peer, tag, std::as_bytes(std::span(s.data, s.count))));
  }
}

}  // namespace dpg::collective
