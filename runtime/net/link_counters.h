// What one peer's links carried and how long its step waited on them, counted as it runs, for
// the live status page (apps/status_feed.h): bytes sent to and received from each peer, the time
// the step's messages were in flight and the time its training thread was blocked, and whom that
// thread waits on now. A TracingTransport given a LinkCounters fills it (tracing_transport.h).
//
// The definitions are tools/trace_summary.py's, measured live rather than read from a trace:
// - in flight: the length of the union of the step's sends and receives, each from its post to
//   the return of its wait, on every thread but the service threads (those marked by an
//   OffStepThread: a message service's responders, the consensus poll, the status feed), which
//   wait for other peers' requests on their behalf;
// - blocked: the summed time the training thread (the one that built the counters) spent in
//   wait(), evaluation's collectives included.
// Bytes count at the return of a successful wait, the sender's and the receiver's alike, so
// that A's bytes sent to B and B's bytes received from A agree once both have waited.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace dpg::net {

// Marks the calling thread, while it lives, as one that serves other peers rather than running
// this peer's step: its messages count in the bytes but not in the in-flight time.
class OffStepThread {
 public:
  OffStepThread();
  ~OffStepThread();
  OffStepThread(const OffStepThread&) = delete;
  OffStepThread& operator=(const OffStepThread&) = delete;
  static bool here();  // is the calling thread marked

 private:
  bool was_;
};

class LinkCounters {
 public:
  using Clock = std::chrono::steady_clock;
  // The constructing thread is the training thread.
  explicit LinkCounters(int world);

  struct Snapshot {
    std::vector<uint64_t> sent, received;  // bytes, per peer
    int64_t in_flight_ns = 0;              // the step's transfers' union, up to now
    int64_t blocked_ns = 0;                // the training thread's waits, up to now
    int waiting_on = -1;                   // the peer of the training thread's wait now, or -1
    int64_t waiting_ns = 0;                // how long that wait has lasted
  };
  Snapshot snapshot() const;
  int world() const { return static_cast<int>(sent_.size()); }

  // Called by the transport that counts (TracingTransport).
  // A send or receive of the step was posted (on a thread not marked OffStepThread), and its
  // wait returned or failed.
  void posted();
  void done();
  void carried(int peer, bool is_send, uint64_t bytes);
  bool training_thread() const { return std::this_thread::get_id() == training_; }
  void wait_begin(int peer);                    // on the training thread
  void wait_end();

 private:
  static int64_t now_ns();
  const std::thread::id training_;
  std::vector<std::atomic<uint64_t>> sent_, received_;
  mutable std::mutex flight_mu_;
  int in_flight_ = 0;          // the step's operations posted and not yet waited
  int64_t flight_since_ = 0;   // when in_flight_ last went from 0 to 1
  int64_t flight_total_ = 0;   // closed intervals so far
  std::atomic<int64_t> blocked_ns_{0};
  std::atomic<int> waiting_on_{-1};
  std::atomic<int64_t> waiting_since_{0};
};

}  // namespace dpg::net
