// The transport over TCP with Boost.Asio: one connection per pair of peers that talk, one I/O
// thread running one io_context, framed messages read straight into the posted receive buffers.
// Nothing here exposes Asio; the caller sees only the Transport interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/net/hosts.h"
#include "runtime/net/transport.h"

namespace dpg::net {

struct TcpOptions {
  std::chrono::milliseconds timeout{30000};  // every wait, from when the op was posted (x2 at most)
  std::chrono::milliseconds connect_timeout{30000};  // the whole connection set-up
  uint64_t config_hash = 0;         // peers with different hashes refuse to connect
  int socket_buffer_bytes = 0;      // SO_SNDBUF/SO_RCVBUF; 0 keeps the kernel's autotuning
  int spin_us = 50;                 // how long a wait polls and yields before it sleeps
  // false: the waiting thread runs the I/O itself (lowest latency; nothing moves while no one
  // waits). true: an I/O thread runs it, so messages flow while the caller computes.
  bool progress_thread = false;
};

class TcpTransport final : public Transport {
 public:
  // Listens at hosts.peers[rank], connects to every rank in `peers` (the peers this one talks
  // to; the relation must be symmetric) and checks each handshake. Returns when all are
  // connected; throws naming the peer that never answered or refused.
  TcpTransport(const HostsFile& hosts, int rank, const std::vector<int>& peers,
               TcpOptions options);
  // Says goodbye to every peer and waits (bounded) for theirs, or, after a failure, tells every
  // peer why this one is stopping; then closes. Never throws, never hangs.
  ~TcpTransport() override;

  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  int rank() const override;
  int world() const override;
  Handle send(int peer, Tag tag, std::span<const std::byte> data) override;
  Handle recv(int peer, Tag tag, std::span<std::byte> data) override;
  void wait(Handle handle) override;
  std::chrono::milliseconds timeout() const override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dpg::net
