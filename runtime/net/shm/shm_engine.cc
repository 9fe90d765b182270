// The engine: moves posted sends into the rings and messages out of them into posted receives,
// waits for peers by spinning and then sleeping on this process's eventfd (with the peers' Unix
// sockets, whose end says a peer is gone). Callers hold Impl::mu unless a function says so.
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/net/shm/shm_impl.h"

namespace dpg::net {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kHeadWaits = std::chrono::milliseconds(1);
using shm::SlotHeader;
using shm::SlotKind;

void fill(SlotHeader& h, SlotKind kind, const OpSlot& s) {
  h.kind = static_cast<uint32_t>(kind);
  h.op = s.tag.op;
  h.round = s.tag.round;
  h.chunk = s.tag.chunk;
  h.length = s.size;
}

// Stamps this side's heartbeat in one pair: during a long message, after each slot, so that the
// peer waiting on it sees this process running (and polls on instead of yielding its core).
void stamp(ShmPair& p) {
  p.view.mine().beat_ns.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

// A peer's socket carries nothing after the handshake: readable means it ended (the peer's
// process exited or closed the transport).
bool socket_ended(int fd) {
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace

bool ShmTransport::Impl::push_sends(ShmPair& p) {
  if (ops.poisoned()) return false;  // no new data once failed: its buffer may be gone
  std::string why;
  const auto room = p.view.out.free_slots(why);
  if (!room) {
    broken(p, why);
    return false;
  }
  const std::size_t payload = p.view.out.payload_bytes();
  uint64_t free = *room;
  bool did = false;
  while (p.send_head != kNone && free > 0) {
    OpSlot& s = ops.slot(p.send_head);
    SlotHeader& h = *p.view.out.write_slot(0);
    const bool direct = p.direct && options.direct_min_bytes > 0 && s.size >= options.direct_min_bytes;
    if (direct) {
      fill(h, SlotKind::direct, s);
      h.bytes = 0;
      h.address = reinterpret_cast<uint64_t>(s.data);
      p.view.out.publish(1);
      ops.append(p.direct_head, p.direct_tail, ops.take_front(p.send_head, p.send_tail));
      ++p.direct_sent;
    } else {
      const std::size_t n = std::min(payload, s.size - p.send_offset);
      fill(h, p.send_offset == 0 ? SlotKind::first : SlotKind::more, s);
      h.bytes = static_cast<uint32_t>(n);
      if (n > 0) std::memcpy(p.view.out.write_payload(0), s.data + p.send_offset, n);
      p.view.out.publish(1);
      stamp(p);
      p.send_offset += n;
      if (p.send_offset == s.size) {
        p.send_offset = 0;
        ops.complete(ops.take_front(p.send_head, p.send_tail));
      }
    }
    --free;
    did = true;
  }
  if (p.bye_queued && !p.bye_written && p.send_head == kNone && free > 0) {
    SlotHeader& h = *p.view.out.write_slot(0);
    h = SlotHeader{};
    h.kind = static_cast<uint32_t>(SlotKind::bye);
    p.view.out.publish(1);
    p.bye_written = true;
    did = true;
  }
  // Direct sends complete once the peer says it has copied them (in order).
  const uint64_t acked = p.view.out.state().direct_done.load(std::memory_order_acquire);
  if (acked > p.direct_sent) {
    broken(p, "it acknowledged " + std::to_string(acked) + " direct messages of " +
                  std::to_string(p.direct_sent));
    return did;
  }
  while (p.direct_acked < acked) {
    ++p.direct_acked;
    ops.complete(ops.take_front(p.direct_head, p.direct_tail));
    did = true;
  }
  return did;
}

void ShmTransport::Impl::read_direct(ShmPair& p, const SlotHeader& h, std::byte* data,
                                     std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    iovec local{data + done, size - done};
    iovec remote{reinterpret_cast<void*>(h.address + done), size - done};
    const ssize_t got = ::process_vm_readv(p.pid, &local, 1, &remote, 1, 0);
    if (got > 0) {
      done += static_cast<std::size_t>(got);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    const int e = got < 0 ? errno : EFAULT;
    ops.poison(e == ESRCH ? Code::unavailable : Code::data_loss,
               prefix() + "cannot read peer " + std::to_string(p.peer) + "'s message (" +
                   to_string(Tag{h.op, h.round, h.chunk}) + ", " + std::to_string(size) +
                   " bytes) from its " +
                   "memory: " + std::strerror(e) +
                   (e == ESRCH ? "; that process has ended" : ""));
    return;
  }
}

// The message whose first slot is at the tail: matched to a posted receive, or parked.
bool ShmTransport::Impl::pull_message(ShmPair& p, const SlotHeader& h) {
  const Tag tag{h.op, h.round, h.chunk};
  uint32_t prev = kNone, it = p.recv_head;
  while (it != kNone && !(ops.slot(it).tag == tag)) {
    prev = it;
    it = ops.slot(it).next;
  }
  if (it == kNone) {
    // Best read once, straight into its receive: while no receive from this peer is posted, it
    // stays in the ring (or its sender's memory), where its receive usually comes within
    // microseconds. Once a receive is posted behind it, or a thread here has waited on anything
    // for kHeadWaits (its sender may be waiting for the room it holds), it is copied out into
    // the early queue (transport.h).
    if (p.recv_head == kNone) {
      const auto now = Clock::now();
      if (!p.head_waits) p.head_waits_since = now;
      p.head_waits = true;
      if (!ops.waiting() || now - p.head_waits_since < kHeadWaits) {
        p.parked_now.store(true, std::memory_order_relaxed);
        return false;
      }
    }
    if (!p.early.fits(h.length)) {
      p.parked_now.store(true, std::memory_order_relaxed);
      p.set_held(held_back(p.peer, tag, h.length, p.early));
      return false;  // holds back later messages until its receive is posted
    }
    return pull_early(p, h);
  }
  p.parked_now.store(false, std::memory_order_relaxed);
  p.head_waits = false;
  if (p.held_set) p.set_held({});
  OpSlot& r = ops.slot(it);
  if (r.size != h.length) {
    ops.poison(Code::data_loss, prefix() + "peer " + std::to_string(p.peer) + " sent " +
                                    std::to_string(h.length) + " bytes for " + to_string(tag) +
                                    " but the receive expects " + std::to_string(r.size));
    return false;
  }
  // Taken out of the list of posted receives.
  if (prev == kNone) {
    p.recv_head = r.next;
  } else {
    ops.slot(prev).next = r.next;
  }
  if (p.recv_tail == it) p.recv_tail = prev;
  if (h.kind == static_cast<uint32_t>(SlotKind::direct)) {
    read_direct(p, h, r.data, r.size);
    if (ops.poisoned()) return false;
    // A sender that failed meanwhile may have freed the buffer just read: its abort, written
    // before it gave the buffer up, is checked after the copy.
    if (p.view.theirs().abort_len.load(std::memory_order_acquire) != 0) return false;
    p.view.in.release(1);
    p.view.in.state().direct_done.fetch_add(1, std::memory_order_release);
    ops.complete(it);
    return true;
  }
  const std::size_t n = std::min(p.view.in.payload_bytes(), r.size);
  if (h.bytes != n) {
    broken(p, "the first slot of " + to_string(tag) + " holds " + std::to_string(h.bytes) +
                  " bytes, expected " + std::to_string(n));
    return false;
  }
  if (n > 0) std::memcpy(r.data, p.view.in.read_payload(0), n);
  p.view.in.release(1);
  if (n == r.size) {
    ops.complete(it);
  } else {
    p.target = it;
    p.dst = r.data + n;
    p.left = r.size - n;
  }
  return true;
}

// A message with no receive posted, within the early queue's bound: copied out of the ring.
bool ShmTransport::Impl::pull_early(ShmPair& p, const SlotHeader& h) {
  const Tag tag{h.op, h.round, h.chunk};
  p.parked_now.store(false, std::memory_order_relaxed);
  p.head_waits = false;
  if (p.held_set) p.set_held({});
  const auto e = p.early.add(tag, h.length);
  if (h.kind == static_cast<uint32_t>(SlotKind::direct)) {
    read_direct(p, h, e->bytes.get(), e->size);
    if (ops.poisoned()) return false;
    if (p.view.theirs().abort_len.load(std::memory_order_acquire) != 0) return false;
    p.view.in.release(1);
    p.view.in.state().direct_done.fetch_add(1, std::memory_order_release);
    p.early_at = e;
    early_done(p);
    return true;
  }
  const std::size_t n = std::min(p.view.in.payload_bytes(), e->size);
  if (h.bytes != n) {
    broken(p, "the first slot of " + to_string(tag) + " holds " + std::to_string(h.bytes) +
                  " bytes, expected " + std::to_string(n));
    return false;
  }
  if (n > 0) std::memcpy(e->bytes.get(), p.view.in.read_payload(0), n);
  p.view.in.release(1);
  p.early_at = e;
  if (n == e->size) {
    early_done(p);
  } else {
    p.to_early = true;
    p.dst = e->bytes.get() + n;
    p.left = e->size - n;
  }
  return true;
}

void ShmTransport::Impl::early_done(ShmPair& p) {
  const auto e = p.early_at;
  e->complete = true;
  uint32_t prev = kNone, it = p.recv_head;
  while (it != kNone && !(ops.slot(it).tag == e->tag)) {
    prev = it;
    it = ops.slot(it).next;
  }
  if (it == kNone || ops.poisoned()) return;
  OpSlot& r = ops.slot(it);
  (prev == kNone ? p.recv_head : ops.slot(prev).next) = r.next;
  if (p.recv_tail == it) p.recv_tail = prev;
  const std::string why = p.early.deliver(e, p.peer, r.data, r.size);
  if (!why.empty()) return ops.poison(Code::data_loss, prefix() + why);
  ops.complete(it);
}

bool ShmTransport::Impl::take_early(ShmPair& p, uint32_t index) {
  if (p.early.empty()) return false;
  OpSlot& r = ops.slot(index);
  const auto e = p.early.find(r.tag);
  if (e == p.early.end() || !e->complete) return false;
  if (ops.poisoned()) return true;  // failed: nothing more moves into its buffers
  const std::string why = p.early.deliver(e, p.peer, r.data, r.size);
  if (!why.empty()) {
    ops.poison(Code::data_loss, prefix() + why);
  } else {
    ops.complete(index);
  }
  return true;
}


bool ShmTransport::Impl::pull(ShmPair& p) {
  bool did = false;
  std::string why;
  while (!ops.poisoned()) {
    const auto ready = p.view.in.ready(why);
    if (!ready) {
      broken(p, why);
      break;
    }
    if (*ready == 0) break;
    SlotHeader h;  // a copy: the checks below must see what is used
    std::memcpy(&h, p.view.in.read_slot(0), sizeof h);
    if (p.target != kNone || p.to_early) {
      const Tag& in_tag = p.to_early ? p.early_at->tag : ops.slot(p.target).tag;
      const std::size_t n = std::min(p.view.in.payload_bytes(), p.left);
      if (h.kind != static_cast<uint32_t>(SlotKind::more) || !(Tag{h.op, h.round, h.chunk} == in_tag) ||
          h.bytes != n) {
        broken(p, "a slot of " + to_string(in_tag) + " with kind " + std::to_string(h.kind) +
                      " and " + std::to_string(h.bytes) + " bytes, expected the next " +
                      std::to_string(n) + " bytes");
        break;
      }
      std::memcpy(p.dst, p.view.in.read_payload(0), n);
      p.view.in.release(1);
      stamp(p);
      p.dst += n;
      p.left -= n;
      if (p.left == 0 && p.to_early) {
        p.to_early = false;
        early_done(p);
      } else if (p.left == 0) {
        ops.complete(p.target);
        p.target = kNone;
      }
      did = true;
      continue;
    }
    if (h.kind == static_cast<uint32_t>(SlotKind::bye)) {
      p.view.in.release(1);
      p.bye_received = true;
      did = true;
      break;
    }
    if (h.kind != static_cast<uint32_t>(SlotKind::first) &&
        h.kind != static_cast<uint32_t>(SlotKind::direct)) {
      broken(p, "a message starts with a slot of kind " + std::to_string(h.kind));
      break;
    }
    if (!pull_message(p, h)) break;
    did = true;
  }
  return did;
}

// A peer that has finished, or whose process is gone, can take no more sends and send nothing
// more; anything still posted with it is then an error.
void ShmTransport::Impl::finish_sends_to_gone(ShmPair& p) {
  if (ops.poisoned()) return;
  const std::string peer = "peer " + std::to_string(p.peer);
  if (p.bye_received && (p.recv_head != kNone || p.target != kNone)) {
    ops.poison(Code::aborted, prefix() + peer + " has finished and said goodbye, but a receive " +
                                  "from it is still posted: that peer stopped early");
    return;
  }
  if (!p.gone) return;
  std::string why;
  const auto ready = p.view.in.ready(why);
  // What it left is still read. But with its next message waiting for a receive not posted, a
  // wait on a receive from it is a wait on a later message (or on one it never sent), which
  // cannot come: the receive of every message a peer sent must be posted before a wait on a
  // later one (transport.h).
  bool waited = false;  // a receive from it is waited on and still pending
  const uint64_t w = p.waited_recv.load(std::memory_order_acquire);
  if (w != ~uint64_t{0}) {
    const OpSlot& r = ops.slot(static_cast<uint32_t>(w >> 32));
    waited = r.generation == static_cast<uint32_t>(w) &&
             r.state.load(std::memory_order_acquire) == OpSlot::pending;
  }
  const bool stuck =
      !ready || *ready == 0 || (p.parked_now.load(std::memory_order_relaxed) && waited);
  if (!p.bye_received && !stuck) return;
  if (!p.bye_received) {
    ops.poison(Code::unavailable, prefix() + peer + " is gone: its shared-memory socket closed " +
                                      "without a goodbye (process " + std::to_string(p.pid) +
                                      " exited or was killed)");
  } else if (p.send_head != kNone || p.direct_head != kNone) {
    ops.poison(Code::aborted, prefix() + peer + " has finished and exited, but a send to it is " +
                                  "still pending: that peer stopped early");
  }
}

bool ShmTransport::Impl::progress(ShmPair& p) {
  if (ops.poisoned()) return false;
  const uint32_t aborted = p.view.theirs().abort_len.load(std::memory_order_acquire);
  if (aborted != 0) {
    if (p.abort_seen == 0) {
      p.abort_seen = 1;
      const std::string text(p.view.theirs().abort_text, std::min<std::size_t>(aborted, shm::kAbortBytes));
      ops.poison(Code::aborted, "peer " + std::to_string(p.peer) + " aborted: " + text);
    }
    return true;
  }
  bool did = push_sends(p);
  did = pull(p) || did;
  if (p.bye_received || p.gone) finish_sends_to_gone(p);
  if (did) wake(p);
  return did;
}

bool ShmTransport::Impl::progress_all() {
  std::lock_guard lock(mu);
  bool did = false;
  for (ShmPair* p : live) did = progress(*p) || did;
  if (ops.poisoned() && !relayed) publish_abort_locked(ops.report());
  beat();
  return did;
}

void ShmTransport::Impl::wake(ShmPair& p) {
  if (!shm::wants_wake(p.view.theirs())) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(p.doorbell.fd, &one, sizeof one);  // full: already rung
}

void ShmTransport::Impl::beat() {
  const int64_t now = Clock::now().time_since_epoch().count();
  const uint32_t waiting = ops.waiting() || ops.poisoned() ? 1 : 0;  // SideState::waiting
  for (ShmPair* p : live) {
    p->view.mine().beat_ns.store(now, std::memory_order_relaxed);
    p->view.mine().waiting.store(waiting, std::memory_order_relaxed);
  }
}

bool ShmTransport::Impl::check_sockets(int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<ShmPair*> who;
  {
    std::lock_guard lock(mu);
    for (ShmPair* p : live) {
      if (p->gone) continue;
      fds.push_back(pollfd{p->sock.fd, POLLIN, 0});
      who.push_back(p);
    }
  }
  if (fds.empty()) return false;
  if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return false;
  bool any = false;
  std::lock_guard lock(mu);
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0 || !socket_ended(fds[i].fd)) continue;
    who[i]->gone = true;
    any = true;
  }
  return any;
}

void ShmTransport::Impl::sleep_until(Clock::time_point until) {
  std::vector<pollfd> fds{pollfd{doorbell.fd, POLLIN, 0}};
  std::vector<ShmPair*> who{nullptr};
  {
    std::lock_guard lock(mu);
    for (ShmPair* p : live) {
      p->view.mine().sleeping.store(1, std::memory_order_seq_cst);
      if (p->gone) continue;
      fds.push_back(pollfd{p->sock.fd, POLLIN, 0});
      who.push_back(p);
    }
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Once more after saying so: whatever a peer did before it saw the flag is seen here.
  if (!progress_all() && !ops.poisoned()) {
    const auto now = Clock::now();
    const auto left = std::clamp<Clock::duration>(until - now, Clock::duration::zero(), beat_every);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    if (::ppoll(fds.data(), fds.size(), &ts, nullptr) > 0) {
      if (fds[0].revents != 0) {
        uint64_t count;
        [[maybe_unused]] ssize_t n = ::read(doorbell.fd, &count, sizeof count);
      }
      std::lock_guard lock(mu);
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0 && socket_ended(fds[i].fd)) who[i]->gone = true;
      }
    }
  }
  std::lock_guard lock(mu);
  for (ShmPair* p : live) p->view.mine().sleeping.store(0, std::memory_order_relaxed);
}

void ShmTransport::Impl::run_progress_thread() {
  auto idle_since = Clock::now();
  while (!stopping.load(std::memory_order_acquire)) {
    const auto now = Clock::now();
    if (progress_all()) {
      idle_since = now;
      continue;
    }
    if (now - last_check > std::chrono::milliseconds(1)) {
      last_check = now;
      if (check_sockets(0)) continue;
    }
    if (now - idle_since < std::chrono::microseconds(options.spin_us)) {
      sched_yield();
      continue;
    }
    sleep_until(now + beat_every);
  }
}

}  // namespace dpg::net
