#include "runtime/net/op_table.h"

#include <sched.h>

#include <algorithm>
#include <utility>

namespace dpg::net {

using Clock = std::chrono::steady_clock;

OpTable::OpTable(int rank, std::chrono::milliseconds timeout, int spin_us)
    : rank_(rank), timeout_(timeout), spin_us_(spin_us) {}

Handle OpTable::post(OpKind kind, int peer, Tag tag, std::byte* data, std::size_t size) {
  uint32_t index;
  bool full = false;
  {
    std::lock_guard lock(alloc_mu_);
    if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else if (allocated_ == kChunk * kMaxChunks) {
      full = true;
    } else {
      if (allocated_ % kChunk == 0) {
        owned_.push_back(std::make_unique<std::array<OpSlot, kChunk>>());
        chunks_[allocated_ / kChunk].store(owned_.back().get(), std::memory_order_release);
      }
      index = allocated_++;
    }
  }
  if (full) {
    // The caller may have operations posted that it will now never wait on: poisoned, nothing
    // more moves through their buffers (the contract of a failure, transport.h).
    const std::string message = rank_prefix(rank_) + "more than " +
                                std::to_string(kChunk * kMaxChunks) + " operations in flight";
    poison(Code::internal, message);
    fail(Code::internal, message);
  }
  OpSlot& s = slot(index);
  s.kind = kind;
  s.peer = peer;
  s.tag = tag;
  s.data = data;
  s.size = size;
  s.next = kNone;
  s.posted = Clock::now();
  s.state.store(OpSlot::pending, std::memory_order_release);
  return Handle{index, s.generation};
}

void OpTable::complete(uint32_t index) {
  OpSlot& s = slot(index);
  s.state.store(OpSlot::done, std::memory_order_seq_cst);
  // The waiter sets `sleeping` before it checks the state under wait_mu_: either it sees done,
  // or this sees it asleep and wakes it once it is in its cv's wait (the lock is taken only
  // after the waiter has released it there).
  if (s.sleeping.load(std::memory_order_seq_cst)) {
    std::lock_guard lock(wait_mu_);
    s.cv.notify_all();
  }
}

void OpTable::complete_held(uint32_t index) {
  OpSlot& s = slot(index);
  s.state.store(OpSlot::done, std::memory_order_seq_cst);
  s.cv.notify_all();
}

void OpTable::wake_all_sleepers() {
  if (sleepers_.load(std::memory_order_seq_cst) == 0) return;
  for (const auto& chunk : chunks_) {
    std::array<OpSlot, kChunk>* slots = chunk.load(std::memory_order_acquire);
    if (slots == nullptr) break;  // chunks are made in order
    for (OpSlot& s : *slots) {
      if (s.sleeping.load(std::memory_order_relaxed)) s.cv.notify_all();
    }
  }
}

void OpTable::release(uint32_t index) {
  OpSlot& s = slot(index);
  s.state.store(OpSlot::idle, std::memory_order_relaxed);
  ++s.generation;
  std::lock_guard lock(alloc_mu_);
  free_.push_back(index);
}

void OpTable::append(uint32_t& head, uint32_t& tail, uint32_t index) {
  slot(index).next = kNone;
  if (tail == kNone) {
    head = index;
  } else {
    slot(tail).next = index;
  }
  tail = index;
}

uint32_t OpTable::take_front(uint32_t& head, uint32_t& tail) {
  const uint32_t index = head;
  head = slot(index).next;
  if (head == kNone) tail = kNone;
  return index;
}

const OpSlot* OpTable::find(Handle h) {
  if (h.slot >= allocated_ || slot(h.slot).generation != h.generation ||
      slot(h.slot).state.load(std::memory_order_acquire) == OpSlot::idle) {
    return nullptr;
  }
  return &slot(h.slot);
}

void OpTable::wait(Handle h, const Driver* drive) {
  if (!find(h)) {
    fail(Code::internal, rank_prefix(rank_) + "wait on a stale or unknown handle");
  }
  OpSlot& s = slot(h.slot);
  auto is_done = [&] { return s.state.load(std::memory_order_acquire) == OpSlot::done; };
  // A background thread's wait is not this peer waiting (transport.h, BackgroundWaits).
  struct Inside {
    std::atomic<int>* n;
    explicit Inside(std::atomic<int>* count) : n(count) {
      if (n) n->fetch_add(1, std::memory_order_relaxed);
    }
    ~Inside() {
      if (n) n->fetch_sub(1, std::memory_order_relaxed);
    }
  } inside(BackgroundWaits::here() ? nullptr : &waiting_);
  // Short spin first: with more peers than cores the message usually lands within a few
  // microseconds, and yielding keeps the core for whoever has work.
  const auto spin_end = Clock::now() + std::chrono::microseconds(spin_us_);
  while (!is_done() && !poisoned() && Clock::now() < spin_end) {
    if (drive) (*drive)(s, spin_end, false);
    if (!is_done()) sched_yield();
  }
  // Blocks in steps of at most 100 ms, so that a wait past its deadline rechecks its peer.
  auto step_end = [&] {
    const auto now = Clock::now();
    const auto deadline = s.posted + timeout_;
    return now < deadline ? std::min(deadline, now + std::chrono::milliseconds(100))
                          : now + std::chrono::milliseconds(100);
  };
  std::string failure;
  auto give_up = [&] {
    if (Clock::now() < s.posted + timeout_) return false;
    failure = expired(s);
    return !failure.empty();
  };
  if (drive) {
    while (!is_done() && !poisoned() && !give_up()) (*drive)(s, step_end(), true);
  }
  if (!is_done() && !poisoned() && failure.empty()) {
    std::unique_lock lock(wait_mu_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    s.sleeping.store(true, std::memory_order_seq_cst);
    // Past its deadline a wait asks about its peer without holding this table's lock: the
    // in-process fabric's answer reads the peer's table.
    for (;;) {
      if (is_done() || poisoned()) break;
      if (Clock::now() >= s.posted + timeout_) {
        lock.unlock();
        const bool up = give_up();
        lock.lock();
        if (up) break;
      }
      s.cv.wait_until(lock, step_end());
    }
    s.sleeping.store(false, std::memory_order_relaxed);
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  }
  if (!is_done() && !poisoned() && !failure.empty()) {
    poison(Code::deadline_exceeded, failure);
    throw Error(Code::deadline_exceeded, failure);
  }
  if (!is_done()) rethrow(describe(s));
  release(h.slot);
}

void OpTable::watch(Liveness liveness, Clock::duration silence) {
  liveness_ = std::move(liveness);
  silence_ = silence;
}

std::string OpTable::expired(const OpSlot& s) const {
  const auto waited = Clock::now() - s.posted;
  std::string message = rank_prefix(rank_) + describe(s) + " timed out after " +
                        seconds_text(waited);
  if (held_ && s.kind == OpKind::recv) {
    const std::string held = held_(s.peer);
    if (!held.empty()) return message + ": " + held;
  }
  if (!liveness_) return message;
  const std::string peer = "peer " + std::to_string(s.peer);
  const PeerState p = liveness_(s.peer);
  if (!p.failed.empty()) return message + ": " + peer + " failed: " + p.failed;
  if (p.silent_for >= silence_) {
    return message + ": " + peer + " is silent (nothing from it, not even a heartbeat, for " +
           seconds_text(p.silent_for) + "): " +
           (p.note.empty() ? "it stopped, hung, or was busy past the timeout" : p.note);
  }
  if (!p.waiting) {
    return message + ": " + peer + " is alive but not waiting on the network: its training " +
           "is hung or was busy past the timeout";
  }
  if (waited < 2 * timeout_) return "";
  return message + ": " + peer + " is alive and itself waiting, but this operation never " +
         "completed within twice the timeout";
}

void OpTable::poison(Code code, const std::string& message) {
  std::lock_guard lock(wait_mu_);
  if (poisoned_.load(std::memory_order_relaxed)) return;
  code_ = code;
  message_ = message;
  poisoned_.store(true, std::memory_order_release);
  wake_all_sleepers();
}

std::string OpTable::failure() const {
  std::lock_guard lock(wait_mu_);
  return message_;
}


std::string OpTable::report() const {
  std::lock_guard lock(wait_mu_);
  return rank_prefix(rank_) + without_rank_prefix(message_, rank_);
}

void OpTable::rethrow(const std::string& context) const {
  std::lock_guard lock(wait_mu_);
  throw Error(code_, rank_prefix(rank_) + context + " failed: " + without_rank_prefix(message_, rank_));
}

std::string OpTable::describe(const OpSlot& s) {
  return std::string(s.kind == OpKind::send ? "send to" : "receive from") + " peer " +
         std::to_string(s.peer) + " (" + to_string(s.tag) + ", " + std::to_string(s.size) +
         " bytes)";
}

}  // namespace dpg::net
