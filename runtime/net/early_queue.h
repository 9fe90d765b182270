// Messages a peer sent before their receive was posted, copied out of the connection so that it
// keeps being read: each transport keeps one EarlyQueue per peer, within a fixed bound
// (EarlyLimits: bytes and count). A message that would pass the bound is not copied: it waits
// where it is for its receive, and holds back the later messages from that peer (back-pressure,
// as a TCP stream does); a wait that times out behind it names the peer and the tags queued
// (describe()). docs/LIMITS.md has the figures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/net/transport.h"

namespace dpg::net {

class EarlyQueue {
 public:
  struct Entry {
    Tag tag;
    std::size_t size = 0;
    std::unique_ptr<std::byte[]> bytes;
    bool complete = false;  // its whole payload has arrived (TCP and shm copy it in pieces)
  };
  using Iter = std::list<Entry>::iterator;

  explicit EarlyQueue(EarlyLimits limits = {}) : limits_(limits) {}
  bool empty() const { return entries_.empty(); }
  // Whether a message of `size` bytes may be queued now.
  bool fits(std::size_t size) const {
    return entries_.size() < limits_.messages && size <= limits_.bytes - bytes_;
  }
  // Queues a message (fits() must have said yes); its bytes are copied into the entry's buffer.
  Iter add(Tag tag, std::size_t size);
  // The queued message under `tag`, or end().
  Iter find(const Tag& tag);
  Iter end() { return entries_.end(); }
  // Copies a complete entry into a receive's buffer of `size` bytes and drops it. Returns "" or,
  // when the sizes differ (the entry is dropped all the same), the data_loss message's end:
  // "peer 2 sent 8 bytes for op 5 round 1 chunk 0 but the receive expects 16".
  std::string deliver(Iter it, int peer, std::byte* data, std::size_t size);
  void drop(Iter it);
  // "2 early messages (40 of 1048576 bytes, 2 of 64 messages): op 5 round 1 chunk 0 (8 bytes),
  // ..." (at most 8 tags), for the message of a wait that timed out.
  std::string describe() const;
  const EarlyLimits& limits() const { return limits_; }

 private:
  EarlyLimits limits_;
  std::list<Entry> entries_;
  std::size_t bytes_ = 0;
};

// A connection's receiving side of it (TCP's Conn and shared memory's ShmPair derive from it): the
// queue, the entry a message being read goes into, and what holds back the peer's messages, which
// the I/O side writes and a timed-out wait reads (under a leaf mutex of its own).
struct EarlyIn {
  EarlyQueue early;
  EarlyQueue::Iter early_at;
  bool to_early = false;  // the message being read goes into early_at
  bool held_set = false;
  void set_held(const std::string& held) {
    std::lock_guard lock(held_mu_);
    held_ = held;
    held_set = !held.empty();
  }
  std::string held() const {
    std::lock_guard lock(held_mu_);
    return held_;
  }

 private:
  mutable std::mutex held_mu_;
  std::string held_;
};

// The message a transport's wait adds after a timeout on a receive from a peer whose next
// message waits for a receive not posted while `queue` is full: "peer 2's next message (op 1
// round 3 chunk 0, 4194304 bytes) waits for a receive not posted, and it holds back every later
// one: the early queue is full with ..." (see EarlyQueue::describe()).
std::string held_back(int peer, const Tag& parked, std::size_t parked_size, const EarlyQueue& queue);

}  // namespace dpg::net
