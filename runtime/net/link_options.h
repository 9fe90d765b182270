// What every transport between processes takes from its owner (TcpOptions and ShmOptions extend
// it): deadlines, the settings hash the peers must share, and who moves the data. A peer's links
// share one of these whichever transport carries them (apps/transport_setup.h sets both from it).
#pragma once

#include <chrono>
#include <cstdint>

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
};

}  // namespace dpg::net
