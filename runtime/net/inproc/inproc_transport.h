// An in-process transport: the peers of one world are threads, and a message is one memcpy from
// the sender's buffer into the posted receive. Same matching rules as TCP (messages from one peer
// are taken in the order sent), so the collectives can be unit-tested fast and without sockets.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/net/transport.h"

namespace dpg::net {

class OpTable;
class InprocTransport;

class InprocFabric {
 public:
  explicit InprocFabric(int world, std::chrono::milliseconds timeout = std::chrono::seconds(20));
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
  // Moves every message that can be matched from src to dst. Caller holds mu_.
  void match(int src, int dst);

  int world_;
  std::mutex mu_;
  std::vector<std::unique_ptr<InprocTransport>> peers_;
  std::vector<std::deque<Pending>> sends_;  // [src * world + dst], in send order
  std::vector<std::deque<Pending>> recvs_;  // [dst * world + src], in post order
};

}  // namespace dpg::net
