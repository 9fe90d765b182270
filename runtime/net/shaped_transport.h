// A Transport that makes each link to a peer behave as the NetworkShape says (link_shape.h): a
// message to that peer is serialised at the link's bandwidth behind the messages sent before it
// (a token bucket in time: the link is busy for bytes * 8 / bandwidth per message), then
// delivered after the one-way latency, plus a seeded normal jitter, plus one round trip for each
// segment the loss draws; messages on one link arrive in the order they were sent, as on a
// stream. It decorates any transport (TCP, shared memory, in-process), so an emulated link is a
// link whatever carries it; receives pass through untouched (the sender shapes).
//
// A send completes (its wait returns) when its last byte has left the link's sender, that is
// when it has been serialised; its bytes are copied then, and the copy is what the inner
// transport sends at the arrival time. The copies on the wire of one link are bounded by
// kShapedInFlightBytes (beyond it the next message waits to be serialised, as a full socket
// buffer makes a writer wait), so memory stays bounded by what the links carry. Two threads
// work for it: one serialises every link, one per link in use delivers; the inner transport must
// therefore accept calls from several threads (its progress thread on: LinkOptions).
// docs/HETEROGENEITY.md.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "runtime/net/link_shape.h"
#include "runtime/net/transport.h"

namespace dpg::net {

inline constexpr std::size_t kShapedInFlightBytes = std::size_t{16} << 20;

class ShapedTransport final : public Transport {
 public:
  // `inner` must outlive this object and accept calls from several threads at once.
  ShapedTransport(Transport& inner, const NetworkShape& network);
  // Delivers what is still on the links (within the timeout), then stops its threads.
  ~ShapedTransport() override;

  int rank() const override { return inner_.rank(); }
  int world() const override { return inner_.world(); }
  Handle send(int peer, Tag tag, std::span<const std::byte> data) override;
  Handle recv(int peer, Tag tag, std::span<std::byte> data) override;
  void wait(Handle handle) override;
  std::chrono::milliseconds timeout() const override { return inner_.timeout(); }
  void poison(Code code, const std::string& message) override;

  // What the link to `peer` was asked to deliver.
  LinkShape shape(int peer) const;

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr uint32_t kShaped = 0x80000000u;  // marks this object's handles

  struct Message {
    uint32_t slot = 0;
    int peer = 0;
    Tag tag;
    std::span<const std::byte> data;  // the caller's, until serialised
    Clock::time_point ready;          // when its last byte has left (bandwidth only)
    std::vector<std::byte> copy;      // the bytes on the wire, once serialised
    Clock::time_point arrival;
    bool posted = false;  // handed to the inner transport
    Handle inner;
  };
  struct Link {
    LinkShape shape;
    std::mt19937_64 rng;
    Clock::time_point next_free{}, last_arrival{};
    std::deque<Message> queued;     // waiting to be serialised, in send order
    std::deque<Message> in_flight;  // serialised, waiting to arrive, in send order
    std::size_t in_flight_bytes = 0;
    bool waited_for_room = false;
    std::condition_variable cv;  // the deliverer's
    std::thread deliverer;
  };
  struct Op {
    uint32_t generation = 0;
    bool live = false, done = false;
    int peer = 0;
    Tag tag;
    Clock::time_point posted;
  };

  void serialise_loop();
  void deliver_loop(int peer);
  // Stores the first failure (under mu_), fails the inner transport and wakes every thread.
  void fail_locked(Code code, const std::string& message);
  [[noreturn]] void rethrow_locked() const;
  Clock::duration extra_delay(Link& link, std::size_t bytes);

  Transport& inner_;
  std::vector<std::unique_ptr<Link>> links_;  // by peer; null where the link is not shaped
  mutable std::mutex mu_;
  std::condition_variable cv_;  // the serialiser's and the waiters'
  std::vector<Op> ops_;
  std::vector<uint32_t> free_;
  std::optional<std::pair<Code, std::string>> failure_;
  bool stopping_ = false;
  std::thread serialiser_;
};

}  // namespace dpg::net
