// An in-process transport: the peers of one world are threads, and a message is one memcpy from
// the sender's buffer into the posted receive. Same matching rules as TCP and shared memory
// (transport.h): by (peer, tag); a message sent before its receive is posted is copied into the
// receiver's early queue for that peer, within its bound, and its send completes; one past the
// bound waits for its receive and holds back the later ones from that peer, as on a stream. So
// the collectives and algorithms can be unit-tested fast and without sockets.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/net/early_queue.h"
#include "runtime/net/transport.h"

namespace dpg::net {

class OpTable;
class InprocTransport;

class InprocFabric {
 public:
  explicit InprocFabric(int world, std::chrono::milliseconds timeout = std::chrono::seconds(20),
                        EarlyLimits early = {});
  ~InprocFabric();
  int world() const { return world_; }
  // The transport of one rank; valid while the fabric lives.
  Transport& peer(int rank);

 private:
  friend class InprocTransport;
  struct Pending {
    InprocTransport* owner;
    uint32_t slot;
  };
  // Moves every message that can be matched from src to dst, into a posted receive or the
  // early queue, in send order. Caller holds mu_.
  void match(int src, int dst);
  // A receive just posted by dst from src: taken from the early queue when its message is there.
  // Caller holds mu_.
  bool take_early(int src, int dst, uint32_t slot);
  // What holds back src's messages to dst (held_back()), or "".
  std::string held(int src, int dst);

  int world_;
  std::mutex mu_;
  std::vector<std::unique_ptr<InprocTransport>> peers_;
  std::vector<std::deque<Pending>> sends_;  // [src * world + dst], in send order
  std::vector<std::deque<Pending>> recvs_;  // [dst * world + src], in post order
  std::vector<EarlyQueue> early_;           // [dst * world + src]
  std::mutex held_mu_;                      // a leaf: guards held_ (read by waits)
  std::vector<std::string> held_;           // [dst * world + src]
};

}  // namespace dpg::net
