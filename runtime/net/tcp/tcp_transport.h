// The transport over TCP with Boost.Asio: one connection per pair of peers that talk, one I/O
// thread running one io_context, framed messages read straight into the posted receive buffers.
// Nothing here exposes Asio; the caller sees only the Transport interface.
//
// A wait that throws hands every posted buffer back: from then on nothing reads or writes one (a
// send already begun goes on from a copy of its rest, so that the frame and the abort after it
// arrive whole; the reader drops payloads). A transport destroyed while the stack unwinds, with
// sends never waited on, gives up the connections of frames it had begun instead, as their
// buffers may be gone; with the progress thread one may still be written from as it goes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/net/hosts.h"
#include "runtime/net/link_options.h"
#include "runtime/net/transport.h"

namespace dpg::net {

// The common part (timeout, connect_timeout, config_hash, spin_us, progress_thread: an I/O thread
// of the transport) in LinkOptions; TCP's own below.
struct TcpOptions : LinkOptions {
  int socket_buffer_bytes = 0;      // SO_SNDBUF/SO_RCVBUF; 0 keeps the kernel's autotuning
  // How long one connection may take over its handshake before it is dropped (a peer that
  // connects and says nothing must not hold the set-up). 0: a quarter of connect_timeout,
  // between 200 ms and 10 s; a genuine peer needs a few round trips.
  std::chrono::milliseconds handshake_timeout{0};
  // Wrap every connection in TLS 1.3 with the hosts file's certificates (tls, peers[].cert_file):
  // each peer verifies the other's certificate against the CA. Costs throughput (encryption and
  // copies into and out of the TLS buffers; see docs/BENCHMARKS.md).
  bool tls = false;
  // Per peer, what may be copied out of the connection ahead of its receive (transport.h).
  EarlyLimits early;
};

class TcpTransport final : public Transport {
 public:
  // Listens at hosts.peers[rank], connects to every rank in `peers` (the peers this one talks
  // to; the relation must be symmetric) and checks each handshake: with hosts.secret every peer
  // proves it (docs/SECURITY.md). Returns when all are connected; throws naming the peer that
  // never answered or refused. Connections that fail their handshake are logged and dropped.
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
  void poison(Code code, const std::string& message) override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dpg::net
