#include "runtime/net/inproc/inproc_transport.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "runtime/core/error.h"
#include "runtime/net/op_table.h"

namespace dpg::net {

class InprocTransport final : public Transport {
 public:
  InprocTransport(InprocFabric& fabric, int rank, std::chrono::milliseconds timeout)
      : fabric_(fabric), rank_(rank), ops_(rank, timeout, 0) {}
  int rank() const override { return rank_; }
  int world() const override { return fabric_.world(); }
  std::chrono::milliseconds timeout() const override { return ops_.timeout(); }

  Handle send(int peer, Tag tag, std::span<const std::byte> data) override {
    refusing(*this, [&] { check_peer(peer); });
    Handle h = ops_.post(OpKind::send, peer, tag, const_cast<std::byte*>(data.data()), data.size());
    std::lock_guard lock(fabric_.mu_);
    fabric_.sends_[rank_ * world() + peer].push_back({this, h.slot});
    fabric_.match(rank_, peer);
    return h;
  }

  Handle recv(int peer, Tag tag, std::span<std::byte> data) override {
    refusing(*this, [&] { check_peer(peer); });
    Handle h = ops_.post(OpKind::recv, peer, tag, data.data(), data.size());
    std::lock_guard lock(fabric_.mu_);
    if (fabric_.take_early(peer, rank_, h.slot)) return h;
    fabric_.recvs_[rank_ * world() + peer].push_back({this, h.slot});
    fabric_.match(peer, rank_);
    return h;
  }

  void wait(Handle handle) override { ops_.wait(handle); }
  // The fabric copies only while holding this table and after checking it is not poisoned.
  void poison(Code code, const std::string& message) override { ops_.poison(code, message); }
  OpTable& ops() { return ops_; }

 private:
  void check_peer(int peer) const {
    if (peer < 0 || peer >= world() || peer == rank_) {
      fail(Code::invalid_argument, rank_prefix(rank_) + "no peer " +
                                       std::to_string(peer) + " to talk to");
    }
  }
  InprocFabric& fabric_;
  int rank_;
  OpTable ops_;
};

InprocFabric::InprocFabric(int world, std::chrono::milliseconds timeout, EarlyLimits early)
    : world_(world),
      sends_(world * world),
      recvs_(world * world),
      held_(world * world) {
  early_.reserve(world * world);
  for (int i = 0; i < world * world; ++i) early_.emplace_back(early);
  for (int r = 0; r < world; ++r) {
    peers_.push_back(std::make_unique<InprocTransport>(*this, r, timeout));
    peers_.back()->ops().watch_held([this, r](int peer) { return held(peer, r); });
  }
  // Every peer is a thread of this process: one that failed says why (a failure here does not
  // reach its peers as a TCP abort would); one alive says whether it is blocked in a wait.
  for (int r = 0; r < world; ++r) {
    peers_[r]->ops().watch(
        [this](int peer) {
          OpTable::PeerState s;
          OpTable& o = peers_.at(static_cast<std::size_t>(peer))->ops();
          if (o.poisoned()) s.failed = o.report();
          s.waiting = o.waiting();
          return s;
        },
        timeout);
  }
}

std::string InprocFabric::held(int src, int dst) {
  if (src < 0 || src >= world_) return {};
  std::lock_guard lock(held_mu_);
  return held_[dst * world_ + src];
}

bool InprocFabric::take_early(int src, int dst, uint32_t slot) {
  EarlyQueue& early = early_[dst * world_ + src];
  if (early.empty()) return false;
  OpTable& rops = peers_[dst]->ops();
  OpSlot& r = rops.slot(slot);
  const auto it = early.find(r.tag);
  if (it == early.end()) return false;
  std::string why;
  {
    auto held = rops.hold();
    if (rops.poisoned()) return true;  // failed: nothing more moves into its buffers
    why = early.deliver(it, src, r.data, r.size);
    if (why.empty()) rops.complete_held(slot);
  }
  if (!why.empty()) {
    rops.poison(Code::data_loss, rank_prefix(dst) + why);
    return true;
  }
  match(src, dst);  // the queue has room again for a message held back
  return true;
}

InprocFabric::~InprocFabric() = default;

Transport& InprocFabric::peer(int rank) { return *peers_.at(rank); }

void InprocFabric::match(int src, int dst) {
  auto& sends = sends_[src * world_ + dst];
  auto& recvs = recvs_[dst * world_ + src];
  while (!sends.empty()) {
    OpSlot& s = sends.front().owner->ops().slot(sends.front().slot);
    auto it = recvs.begin();
    while (it != recvs.end() && !(it->owner->ops().slot(it->slot).tag == s.tag)) ++it;
    OpTable& sops = sends.front().owner->ops();
    if (it == recvs.end()) {
      // No receive yet: into the early queue, as a stream's reader copies it out; past its bound
      // the head waits for its receive and holds back the later ones, as on a TCP stream.
      EarlyQueue& early = early_[dst * world_ + src];
      if (!early.fits(s.size)) {
        std::lock_guard lock(held_mu_);
        held_[dst * world_ + src] = held_back(src, s.tag, s.size, early);
        return;
      }
      auto held = sops.hold();
      if (sops.poisoned()) return;  // its buffer may be gone
      const auto e = early.add(s.tag, s.size);
      if (s.size > 0) std::memcpy(e->bytes.get(), s.data, s.size);
      e->complete = true;
      sops.complete_held(sends.front().slot);
      sends.pop_front();
      continue;
    }
    OpTable& rops = it->owner->ops();
    OpSlot& r = rops.slot(it->slot);
    if (r.size != s.size) {
      rops.poison(Code::data_loss, rank_prefix(dst) + "peer " +
                                       std::to_string(src) + " sent " + std::to_string(s.size) +
                                       " bytes for " + to_string(s.tag) +
                                       " but the receive expects " + std::to_string(r.size));
      return;
    }
    {
      // A poisoned peer's waits all throw, and whoever posted these operations may have freed
      // their buffers since (a thread that gave up on its wait): move no bytes from or into
      // them. Both tables are held, so neither can be poisoned between the check and the copy.
      // The other side then times out on the failed peer, as it would over TCP. The two are
      // taken in address order, the same whichever peer sends.
      OpTable* first = std::min(&rops, &sops, std::less<OpTable*>());
      OpTable* second = first == &rops ? &sops : &rops;
      auto held_first = first->hold();
      std::unique_lock<std::mutex> held_second;
      if (second != first) held_second = second->hold();
      if (rops.poisoned() || sops.poisoned()) return;
      if (s.size > 0) std::memcpy(r.data, s.data, s.size);
      rops.complete_held(it->slot);
      sops.complete_held(sends.front().slot);
    }
    recvs.erase(it);
    sends.pop_front();
  }
  std::lock_guard lock(held_mu_);
  held_[dst * world_ + src].clear();
}

}  // namespace dpg::net
