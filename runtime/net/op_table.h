// The bookkeeping every transport shares: a pool of posted operations with stable addresses, the
// wait with a deadline, and the first failure, which poisons the transport and is rethrown to every
// waiter. Slots are reused, so the hot path allocates nothing once warm.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/net/frame.h"
#include "runtime/net/transport.h"

namespace dpg::net {

enum class OpKind : uint8_t { send, recv };

struct OpSlot {
  enum State : int { idle = 0, pending = 1, done = 2 };
  std::atomic<int> state{idle};
  // Read by the shared-memory progress thread (is the receive a wait names still that one?)
  // while its owner releases the slot: atomic, like state.
  std::atomic<uint32_t> generation{0};
  OpKind kind = OpKind::send;
  int peer = 0;
  Tag tag;
  std::byte* data = nullptr;
  std::size_t size = 0;
  std::chrono::steady_clock::time_point posted;
  alignas(8) HeaderBytes header{};  // the frame header of a TCP send
  uint32_t next = 0;                // the owner's queue link (kNone when last)
  // A waiter asleep on this slot, woken by its cv alone (with OpTable's wait_mu_): completing
  // one operation wakes its own waiter, never every thread asleep in the table (the responders
  // of a message service wait beside the training thread).
  std::atomic<bool> sleeping{false};
  std::condition_variable cv;
};

inline constexpr uint32_t kNone = 0xffffffffu;

class OpTable {
 public:
  explicit OpTable(int rank, std::chrono::milliseconds timeout, int spin_us = 50);

  // Takes a free slot, fills it and returns its handle; the caller hands the index to its engine.
  Handle post(OpKind kind, int peer, Tag tag, std::byte* data, std::size_t size);
  OpSlot& slot(uint32_t index) {
    return (*chunks_[index / kChunk].load(std::memory_order_acquire))[index % kChunk];
  }
  // A queue of slots threaded through OpSlot::next (head and tail are kNone when it is empty),
  // the way each transport keeps a peer's posted sends and receives in order.
  void append(uint32_t& head, uint32_t& tail, uint32_t index);
  uint32_t take_front(uint32_t& head, uint32_t& tail);
  // The posted operation a handle names, or null when the handle is stale or unknown.
  const OpSlot* find(Handle handle);
  // Marks a slot done and wakes its waiter, if one sleeps on it (any thread).
  void complete(uint32_t index);
  // For a thread that is not the table's owner and moves bytes into or out of a posted buffer
  // (the in-process fabric): while held, poison() cannot happen, so a check of poisoned() then
  // the copy then complete_held() is one step to the owner, whose wait returns (and may free
  // the buffer) only before it or after it; and the owner's next wait or rethrow then sees the
  // copy (a happens-before edge, not only the state's store).
  std::unique_lock<std::mutex> hold() const { return std::unique_lock(wait_mu_); }
  void complete_held(uint32_t index);  // complete(), with hold() already taken
  // Runs the transport's I/O on the waiting thread: with block false it handles what is ready
  // (first what concerns `op`, the operation waited on) and returns; with block true it may sleep
  // until something happens or `until` passes.
  using Driver = std::function<void(const OpSlot& op, std::chrono::steady_clock::time_point until,
                                    bool block)>;
  // Waits for the handle's slot; throws the first failure or a timeout naming the operation.
  // Without a driver the waiter sleeps until another thread completes the slot.
  void wait(Handle handle, const Driver* drive = nullptr);

  // What a transport knows of a peer's liveness: how long since anything (data or heartbeat)
  // arrived from it, zero when it has data waiting for this peer; and whether, as of its last
  // heartbeat, its own training thread was blocked in a wait.
  struct PeerState {
    std::chrono::steady_clock::duration silent_for{};
    bool waiting = false;
    std::string note;  // what else is known of a silent peer ("process 12 is stopped ..."), or ""
    std::string failed;  // the peer's own failure, where the transport can see it (in-process)
  };
  // With liveness set, a wait past its timeout fails at once when its peer has failed (quoting
  // its failure), is silent for `silence` (stopped) or is alive but not waiting on the network
  // (hung or busy), naming it. It goes on while its peer is alive and itself blocked in a wait, since that peer's own wait will
  // time out on the peer that caused it and its abort will say so; at twice the timeout it fails
  // in any case. Set before the first wait.
  using Liveness = std::function<PeerState(int peer)>;
  void watch(Liveness liveness, std::chrono::steady_clock::duration silence);
  // What holds back a peer's messages: its next message waits for a receive not posted here,
  // past the early queue's bound (held_back(), early_queue.h), or "". A wait on that peer past
  // its deadline then fails at once saying so, whatever the liveness: the peer cannot send what
  // is waited on before the held message. Set before the first wait; called without locks of
  // the transport's held (only a leaf mutex of its own may be taken).
  using Held = std::function<std::string(int peer)>;
  void watch_held(Held held) { held_ = std::move(held); }

  // Stores the first failure (later ones are dropped) and wakes every waiter.
  void poison(Code code, const std::string& message);
  bool poisoned() const { return poisoned_.load(std::memory_order_acquire); }
  // Whether a thread is inside wait() now, a background one aside (a peer's heartbeats tell
  // it this).
  bool waiting() const { return waiting_.load(std::memory_order_relaxed) > 0; }
  // Throws the stored failure: "rank R: <context> failed: <first failure>".
  [[noreturn]] void rethrow(const std::string& context) const;
  std::string failure() const;
  // The failure as this rank tells its peers: "rank R: <first failure>" (one prefix, whether the
  // failure was its own or a peer's it heard of).
  std::string report() const;

  int rank() const { return rank_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // "receive from peer 2 (op 1 round 17 chunk 4)"
  static std::string describe(const OpSlot& s);

 private:
  static constexpr std::size_t kChunk = 256;
  static constexpr std::size_t kMaxChunks = 4096;
  void release(uint32_t index);

  // Past the deadline: the message to fail with, or "" to keep waiting.
  std::string expired(const OpSlot& s) const;
  // The stored failure without `prefix` ("rank R: ") where it starts with it, so that no message
  // says "rank R:" twice. The caller holds wait_mu_.

  int rank_;
  std::chrono::milliseconds timeout_;
  int spin_us_;
  Liveness liveness_;
  Held held_;
  std::chrono::steady_clock::duration silence_{};
  std::mutex alloc_mu_;
  std::vector<uint32_t> free_;
  std::atomic<uint32_t> allocated_{0};
  std::array<std::atomic<std::array<OpSlot, kChunk>*>, kMaxChunks> chunks_{};
  std::vector<std::unique_ptr<std::array<OpSlot, kChunk>>> owned_;

  // Wakes every waiter asleep on a slot (a poison). The caller holds wait_mu_.
  void wake_all_sleepers();
  mutable std::mutex wait_mu_;  // the lock of every slot's cv
  std::atomic<int> sleepers_{0};
  std::atomic<int> waiting_{0};
  std::atomic<bool> poisoned_{false};
  Code code_ = Code::internal;
  std::string message_;
};

}  // namespace dpg::net
