// A message service for algorithms whose peers talk out of lockstep (ps-async, ad-psgd; the
// partial all-reduce and elastic membership to come): typed, fixed-size requests and replies by
// peer, op and round over the transport's (peer, tag) matching (transport.h).
//
// - Ops. Each op has a request size and a reply size, fixed by public facts (shard and model
//   sizes), never read from a peer; a reply size of 0 makes a one-way notice (no reply).
// - Privacy. What leaves is a Wire (runtime/core/wire.h): a request is one, and a handler fills
//   its reply only through Reply::put, which takes one; a handler gets its request as arrived().
// - Serving. One responder thread per client peer posts the receive of that peer's next request
//   before it comes, runs the handler, and sends the reply; the handler may block (a server
//   holding a reply for staleness) without holding up any other peer.
// - Calling. call() posts the reply's receives, then sends the request; wait() waits for both.
//   Every receive is posted before its message can come, so nothing is copied on the way.
// - Failure. The first failure, on either side, is kept with its culprit peer: a transport error
//   names the peer of the wait that failed, a handler names its own (blame()). A failed handler
//   sends its client the failure instead of a reply, so that the client fails naming the same
//   culprit. Every later wait, drain and rethrow() throws that same first failure.
// - Drain. drain(n) returns once every client's first n requests are answered (a step boundary:
//   a checkpoint or an evaluation then sees a settled state), or throws within twice the timeout
//   naming the peer it waited for.
// Tags: (op, sequence number of the pair's request, 0 request header, 1 request body, 2 reply
// header, 3 reply body); requests of one pair are numbered from `first` on, in order.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/trace.h"
#include "runtime/core/wire.h"
#include "runtime/net/transport.h"

namespace dpg::collective {

struct ServiceOp {
  std::size_t request_bytes = 0;
  std::size_t reply_bytes = 0;
  bool one_way = false;  // no reply at all
};

// Thrown by a handler (or the owner) to fail the service naming the peer at fault.
class Blame : public Error {
 public:
  Blame(int culprit, Code code, const std::string& message)
      : Error(code, message), culprit_(culprit) {}
  int culprit() const { return culprit_; }

 private:
  int culprit_;
};

class Service {
 public:
  struct Request {
    int peer;        // the client
    uint32_t op;     // index into the ops
    uint64_t seq;    // the pair's request number
    uint64_t round;  // the client's own round (its step), for the handler and messages
  };
  // The reply a handler fills (the op's reply_bytes), from values that may leave only.
  class Reply {
   public:
    std::size_t size() const { return out_.size(); }
    // Copies `bytes` to `offset` of the reply (throws internal past its end).
    void put(std::size_t offset, Wire<const std::byte> bytes);

   private:
    friend class Service;
    explicit Reply(std::span<std::byte> out) : out_(out) {}
    std::span<std::byte> out_;
  };
  // Fills `reply` from `request` (the op's request_bytes). Runs on the client's responder
  // thread. Throws Blame to name a culprit other than the client.
  using Handler = std::function<void(const Request&, Wire<const std::byte> request, Reply& reply)>;

  // `tag_op`: the service's operation id (runtime/net/ops.h). `name` starts every message
  // ("ps-async", "ad-psgd").
  // `background`: the responders are net::BackgroundWaits threads (the status feed's, whose
  // waits must not make this peer look blocked on the network).
  Service(net::Transport& t, uint32_t tag_op, std::string name, std::vector<ServiceOp> ops,
          trace::Tracer* tracer = nullptr, bool background = false);
  // Stops the responders (bounded by the transport's timeout) without throwing.
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Starts one responder per client, whose requests are numbered from `first`.
  void serve(const std::vector<int>& clients, uint64_t first, Handler handler);
  bool serving() const { return !responders_.empty(); }

  // Client side (one thread). The next request to every server is numbered `first` (a run
  // resumed at step `first`, whose servers serve from there).
  void number_from(uint64_t first) { next_seq_.assign(next_seq_.size(), first); }
  // Posts a request to `peer`; `request` and `reply` stay alive and
  // `request` unchanged until wait(). Returns a ticket for wait().
  int call(int peer, uint32_t op, uint64_t round, Wire<const std::byte> request,
           std::span<std::byte> reply);
  void wait(int ticket);
  // Tells every peer in `servers` that this client is done (their responders exit) and waits.
  void finish(const std::vector<int>& servers);
  // Waits for every responder to exit (after its client's finish), then rethrows a failure.
  void join();

  // Every client's first n requests are answered.
  void drain(uint64_t n);
  // Fails the service with `culprit` unless it failed before; then throws the first failure.
  [[noreturn]] void fail(int culprit, Code code, const std::string& message);
  void rethrow();
  bool failed() const;
  int culprit() const;  // -1 before a failure
  // Requests of `peer` answered so far.
  uint64_t answered(int peer) const;

 private:
  struct Header {
    uint32_t op;
    uint32_t magic;
    uint64_t round;
  };
  static constexpr std::size_t kTextBytes = 496;
  struct Status {
    int32_t culprit;  // -1: a reply follows
    uint32_t code;
    uint32_t length;
    uint32_t pad;
    char text[kTextBytes];
  };
  struct Call {
    int peer = -1;
    uint64_t seq = 0;
    uint32_t op = 0;
    Header header{};
    Status status{};
    std::vector<net::Handle> handles;
    bool busy = false;
  };
  net::Tag tag(uint64_t seq, uint32_t part) const { return {tag_op_, seq, part}; }
  void respond(int peer, uint64_t first, const Handler& handler);
  // Records a failure (the first one only) and wakes the drains.
  void record(int culprit, Code code, const std::string& message);
  std::string prefix() const;

  net::Transport& t_;
  uint32_t tag_op_;
  std::string name_;
  std::vector<ServiceOp> ops_;
  trace::Tracer* tracer_;
  bool background_;
  std::vector<uint64_t> next_seq_;  // client side, per server
  std::deque<Call> calls_;  // stable addresses: their headers are in flight

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> answered_;  // per client
  std::vector<int> clients_;
  bool failed_ = false, stopping_ = false;
  int culprit_ = -1;
  Code code_ = Code::internal;
  std::string message_;
  std::vector<std::thread> responders_;
};

}  // namespace dpg::collective
