// Every peer's live figures on rank 0's status page (docs/STATUS.md, "Each peer, live"): its
// step, the bytes its links carried to and from each peer, the time its step's messages were in
// flight and its training thread blocked, and whom that thread waits on now
// (net::LinkCounters). Each peer but rank 0 sends them to rank 0 once a second, a one-way notice
// of fixed size over the message service (tag op kOpStatus); rank 0 puts them, and its own, on
// its StatusBoard, noting when each arrived (the page's "last heard from").
//
// What is sent is public: byte counts (fixed by the model's size and the algorithm), step
// numbers and timings, which the page is asked to show. No value of the data is in it.
//
// The feed is part of what the peers agree on at connection (apps/cmd_train.cc mixes it into the
// link hash): rank 0 serves every other peer, which each connect to it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "apps/status_board.h"
#include "runtime/collective/service.h"
#include "runtime/net/link_counters.h"
#include "runtime/net/transport.h"

namespace dpg::app {

class StatusFeed {
 public:
  // Sends (or, on rank 0, takes) the figures every `every`. `board` is rank 0's (null on the
  // others); `t` carries the notices and `counters` are this peer's; all outlive the feed.
  StatusFeed(net::Transport& t, const net::LinkCounters& counters, StatusBoard* board,
             std::chrono::milliseconds every = std::chrono::milliseconds(1000));
  // Without finish() (the run failed): poisons `t`, as an owner giving up does, so that no wait
  // of rank 0's feed outlives the run by a timeout.
  ~StatusFeed();
  StatusFeed(const StatusFeed&) = delete;
  StatusFeed& operator=(const StatusFeed&) = delete;

  // Before step `step` (the trainer's step hook): that many steps are done.
  void on_step(long long step) {
    step_.store(step, std::memory_order_relaxed);
    stepped_.store(true, std::memory_order_relaxed);
  }
  // The run ended well: the last figures (marked finished), then on rank 0 every peer's last
  // ones (within the transport's timeout). A feed that failed is logged, never thrown: the page
  // is not the run.
  void finish();

  // The fixed-size notice: these int64 fields, then bytes sent and received per peer.
  static constexpr std::size_t kFields = 8;
  static std::size_t notice_bytes(int world) {
    return (kFields + 2 * static_cast<std::size_t>(world)) * sizeof(int64_t);
  }
  static std::vector<int64_t> encode(const net::LinkCounters::Snapshot& s, long long step,
                                     int64_t clock_ns, bool finished);
  static PeerFigures decode(const int64_t* fields, int world);

 private:
  void loop();
  void publish(bool finished);  // this peer's figures, now: sent to rank 0, or on the board

  net::Transport& t_;
  const net::LinkCounters& counters_;
  StatusBoard* board_;
  const std::chrono::milliseconds every_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::atomic<long long> step_{0};
  std::atomic<bool> stepped_{false};
  std::optional<collective::Service> service_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, finished_ = false, failed_ = false;
  std::thread thread_;
};

}  // namespace dpg::app
