// The transport between peers of one host through shared memory: per pair of peers one sealed
// memfd mapping holding a single-producer single-consumer ring of fixed-size slots each way,
// passed over a Unix domain socket in the abstract namespace (nothing is left in the file system
// after a crash; the socket stays open to tell a peer's death by its end of file). Large messages
// are read straight from the sender's buffer with process_vm_readv where the kernel allows it
// (one copy), else they go through the ring. Same contract as every transport (transport.h):
// deadlines, the first failure poisons, a dead or stopped peer is named. docs/SHM.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/net/hosts.h"
#include "runtime/net/link_options.h"
#include "runtime/net/transport.h"

namespace dpg::net {

// The common part (timeout, connect_timeout, config_hash, spin_us: how long a wait polls the
// rings and yields before it sleeps, progress_thread) in LinkOptions; shared memory's own below.
struct ShmOptions : LinkOptions {
  // Ring geometry, fixed at start and the same on every peer (checked in the handshake). A slot
  // holds a 64-byte header and slot_bytes - 64 payload bytes; a message takes whole slots. The
  // ring bounds what a sender can have written ahead of its receiver: slots * slot_bytes per
  // direction (1 MiB by default; 2 MiB of shared memory per pair, mapped by both).
  uint32_t slot_bytes = 64 * 1024;
  uint32_t slots = 16;
  // Messages of at least this many bytes are copied by the receiver straight from the sender's
  // buffer (process_vm_readv: one copy instead of two through the ring); smaller ones, or all
  // when 0, go through the ring. Used only with a peer whose handshake probe read succeeded
  // (the kernel may forbid it: Yama's ptrace_scope, seccomp). docs/BENCHMARKS.md has the
  // measurements behind the default.
  std::size_t direct_min_bytes = 0;
  // Within spin_us, how long a poll goes on without yielding the core while the awaited peer is
  // seen running (its heartbeat, stamped on each of its passes over the rings, is younger than
  // this): a message from a peer on another core lands within a microsecond or two, while a
  // yield on a busy machine can hand the core away for milliseconds. A peer not seen running
  // may be waiting for this very core, so then the wait yields at once. 0: always yield.
  // -1 (the default): 20 while this host's peers in the hosts file are no more than its online
  // CPUs, else 0: with more peers than cores the one that sends next often waits for this very
  // core (4 peers on 2 cores, 4 KiB all-reduce, pinned: 46.6 us polling, 29.7 us yielding).
  int busy_poll_us = -1;
  // Per peer, what may be copied out of the ring ahead of its receive (transport.h).
  EarlyLimits early;
};

// options.busy_poll_us for `rank` of `hosts`, its default (-1) resolved as above.
int resolved_busy_poll_us(const HostsFile& hosts, int rank, const ShmOptions& options);

class ShmTransport final : public Transport {
 public:
  // Connects to every rank in `peers` (the relation must be symmetric; each must be listed on
  // this peer's host), checks each handshake (rank, world, config hash, user, boot id, ring
  // sizes) and maps the rings. Throws naming the peer that never answered or was refused.
  ShmTransport(const HostsFile& hosts, int rank, const std::vector<int>& peers,
               ShmOptions options);
  // After a clean run writes a goodbye behind the last message on every ring; after a failure
  // leaves this peer's failure in every pair for its peer to quote. Never throws, never hangs.
  ~ShmTransport() override;

  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  int rank() const override;
  int world() const override;
  Handle send(int peer, Tag tag, std::span<const std::byte> data) override;
  Handle recv(int peer, Tag tag, std::span<std::byte> data) override;
  void wait(Handle handle) override;
  std::chrono::milliseconds timeout() const override;
  void poison(Code code, const std::string& message) override;
  // Whether messages to `peer` of direct_min_bytes or more are read from this process's memory.
  bool direct_to(int peer) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// "/proc/sys/kernel/random/boot_id" of this machine: peers with the same one share a kernel.
std::string boot_id();

}  // namespace dpg::net
