// The transport interface: tagged point-to-point sends and receives of byte ranges between peers.
// Collectives and training algorithms are written against this and never see a socket. TCP
// (runtime/net/tcp) and in-process threads (runtime/net/inproc) implement it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "runtime/core/error.h"

namespace dpg::net {

// Names one message between two peers. Messages from one peer are matched to posted receives by
// tag, whatever the order they arrive in; a tag must be unique among the operations in flight
// between the same two peers.
struct Tag {
  uint32_t op = 0;     // which operation (all-reduce, broadcast, gossip, ...)
  uint64_t round = 0;  // which call of that operation (a per-communicator counter)
  uint32_t chunk = 0;  // which piece of the buffer
  bool operator==(const Tag&) const = default;
};

std::string to_string(const Tag& tag);  // "op 1 round 17 chunk 4"

// How much a transport holds, per peer, of messages that arrived before their receive was posted
// (copied out, so that the connection keeps being read). docs/LIMITS.md.
inline constexpr std::size_t kEarlyBytesPerPeer = std::size_t{1} << 20;
inline constexpr std::size_t kEarlyMessagesPerPeer = 64;
struct EarlyLimits {
  std::size_t bytes = kEarlyBytesPerPeer;
  std::size_t messages = kEarlyMessagesPerPeer;
};

// One posted send or receive. Valid until waited on, exactly once.
struct Handle {
  uint32_t slot = 0;
  uint32_t generation = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;

  // Starts sending `data` to `peer`. The bytes must stay alive and unchanged until wait() returns.
  virtual Handle send(int peer, Tag tag, std::span<const std::byte> data) = 0;
  // Starts receiving exactly data.size() bytes from `peer` under `tag` into `data`: the message
  // from that peer with that tag, whatever the order it was sent or arrives in. A message of
  // another length is an error (data_loss, naming the peer, the tag and both sizes). A message
  // whose receive is already posted goes straight into its buffer (no copy); one that arrives
  // before its receive is copied into the peer's early queue (EarlyLimits, per peer: bytes and
  // count) and the connection goes on being read, so later messages from that peer are not
  // held up. (Shared memory copies it out only once a receive from that peer is posted, or a
  // wait here has lasted a millisecond: until then it stays in the ring, to be read once.) A message that would pass the bound is not copied: it waits for its receive and
  // holds back every later message from that peer (back-pressure, never more memory); a wait
  // that then times out on that peer names it, the held message's tag and the tags queued. So a
  // peer that sends more than the bound ahead of its receiver must still have the receiver post
  // the receive of a held message before it waits on a later one.
  virtual Handle recv(int peer, Tag tag, std::span<std::byte> data) = 0;
  // Blocks until the operation completes. Throws dpg::Error (deadline_exceeded, unavailable,
  // data_loss, ...) naming this rank, the peer, the tag and the elapsed time when it fails or when
  // the timeout passes; after a failure every later call throws the first error.
  virtual void wait(Handle handle) = 0;
  // The timeout of every wait.
  virtual std::chrono::milliseconds timeout() const = 0;
  // Fails this transport from outside a wait, as a failed wait does: for an owner giving up
  // with operations still posted (its own check failed between post and wait, or it is being
  // torn down). Every posted operation and every later call then throws the first failure (this
  // one unless another came first), peers learn of it as of any failure here, and once it
  // returns no bytes move into or out of a buffer posted before: those may then be freed.
  // `message` starts with "rank R: ".
  virtual void poison(Code code, const std::string& message) = 0;
};

// Marks the calling thread, while it lives, as a background one (the status feed's threads,
// apps/status_feed.h): its waits do not count as this peer waiting on the network, which a
// transport tells its peers (for their timeouts' diagnosis) and uses to decide when a message
// whose receive is not posted yet is copied out of its way (shared memory). A thread that
// waits forever on other peers' notices would otherwise make this peer look always blocked.
class BackgroundWaits {
 public:
  BackgroundWaits();
  ~BackgroundWaits();
  BackgroundWaits(const BackgroundWaits&) = delete;
  BackgroundWaits& operator=(const BackgroundWaits&) = delete;
  static bool here();  // is the calling thread marked

 private:
  bool was_;
};

// Runs a send's or receive's check of its arguments (a peer the transport has no connection to,
// a message past the limit) and returns what it returns; when it throws, fails `t` first with
// the same error, as poison() does, and rethrows. A caller whose own post throws unwinds and
// may free the buffers it posted before, so those are given up with the transport, as after any
// failure. The check's message starts with "rank R: ", as poison() expects.
template <class Check>
decltype(auto) refusing(Transport& t, Check&& check) {
  try {
    return check();
  } catch (const Error& e) {
    t.poison(e.code(), e.what());
    throw;
  }
}

}  // namespace dpg::net
