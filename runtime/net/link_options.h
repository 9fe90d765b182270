// What every transport between processes takes from its owner (TcpOptions and ShmOptions extend
// it): deadlines, the settings hash the peers must share, and who moves the data. A peer's links
// share one of these whichever transport carries them (apps/transport_setup.h sets both from it).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "runtime/core/error.h"

namespace dpg::net {

struct LinkOptions {
  // Every wait, from when its operation was posted (x2 at most: the deadline is checked when the
  // wait's slice ends).
  std::chrono::milliseconds timeout{30000};
  std::chrono::milliseconds connect_timeout{30000};  // the whole connection set-up
  uint64_t config_hash = 0;  // peers with different hashes refuse to connect
  int spin_us = 50;          // how long a wait polls and yields before it sleeps
  // false: the waiting thread runs the I/O itself (lowest latency; nothing moves while no one
  // waits). true: a thread of the transport runs it, so messages flow while the caller computes,
  // and several threads may use the transport at once.
  bool progress_thread = false;
  // Read during the connection set-up (a signal handler's flag; null: none): once set, the
  // set-up stops within 100 ms, throwing aborted, rather than waiting out connect_timeout.
  const std::atomic<bool>* stop = nullptr;
};

// How long one incoming connection may take over its handshake before it is dropped, so that a
// connection that says nothing cannot hold the set-up: a quarter of connect_timeout, between
// 200 ms and 10 s (a genuine peer needs a few round trips).
inline std::chrono::milliseconds handshake_bound(std::chrono::milliseconds connect_timeout) {
  return std::clamp<std::chrono::milliseconds>(connect_timeout / 4, std::chrono::milliseconds(200),
                                               std::chrono::seconds(10));
}

// Throws aborted naming `who` when `stop` is set.
inline void check_stop(const std::atomic<bool>* stop, const std::string& who) {
  if (stop != nullptr && stop->load(std::memory_order_relaxed)) {
    fail(Code::aborted, who + "stopped by a signal during the connection set-up");
  }
}

}  // namespace dpg::net
