// Private to runtime/net/shm: the state behind ShmTransport. Everything in Pair except the
// atomics is guarded by Impl::mu (the waiting thread, the posting threads and the progress
// thread all take it to move data).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/net/early_queue.h"
#include "runtime/net/op_table.h"
#include "runtime/net/shm/shm_ring.h"
#include "runtime/net/shm/shm_transport.h"

namespace dpg::net {

// An owned file descriptor.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept;
  ~Fd();
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// A mapping, unmapped when dropped.
struct Mapping {
  void* base = nullptr;
  std::size_t bytes = 0;
  Mapping() = default;
  Mapping(Mapping&& o) noexcept : base(o.base), bytes(o.bytes) { o.base = nullptr; }
  Mapping& operator=(Mapping&& o) noexcept;
  ~Mapping();
};

struct ShmPair : EarlyIn {
  int peer = -1;
  pid_t pid = 0;       // the peer's process (SO_PEERCRED), for direct reads and its state
  Fd sock;             // the Unix socket: its end of file says the peer is gone
  Fd doorbell;         // the peer's eventfd
  Mapping map;
  shm::PairView view;
  bool direct = false;  // the peer can read this process's memory: large sends go direct
  // Sending: posted sends in order; the head's bytes written so far; then direct sends waiting
  // for the peer to have copied them (in order); the goodbye after the last.
  uint32_t send_head = kNone, send_tail = kNone;
  std::size_t send_offset = 0;
  uint32_t direct_head = kNone, direct_tail = kNone;
  uint64_t direct_sent = 0, direct_acked = 0;
  bool bye_queued = false, bye_written = false;
  // Receiving: posted receives; the message being copied in through the ring.
  uint32_t recv_head = kNone, recv_tail = kNone;
  uint32_t target = kNone;
  std::byte* dst = nullptr;
  std::size_t left = 0;
  // (EarlyIn: messages that came before their receive, copied out of the ring within the bound.)
  bool bye_received = false;
  bool gone = false;  // its socket ended: the process exited or closed the transport
  uint32_t abort_seen = 0;
  std::atomic<bool> parked_now{false};  // a message waits for a receive not posted yet
  // The message at the head waits in the ring for its receive, since head_waits_since.
  bool head_waits = false;
  std::chrono::steady_clock::time_point head_waits_since{};
  // The receive from this peer a thread waits on now (slot << 32 | generation), or ~0.
  std::atomic<uint64_t> waited_recv{~uint64_t{0}};
};

struct ShmTransport::Impl {
  Impl(int rank, int world, ShmOptions options);

  int rank;
  int world;
  ShmOptions options;
  OpTable ops;
  std::mutex mu;
  std::vector<std::unique_ptr<ShmPair>> pairs;  // by peer rank; null for peers it does not talk to
  std::vector<ShmPair*> live;                   // the non-null ones
  Fd doorbell;                                  // this process's eventfd, which peers write
  OpTable::Driver driver;
  std::thread thread;  // the progress thread, when options.progress_thread
  std::atomic<bool> stopping{false};
  std::chrono::steady_clock::time_point last_check{};
  std::chrono::microseconds busy_poll{0};  // options.busy_poll_us, resolved
  std::chrono::steady_clock::duration beat_every{};
  std::chrono::steady_clock::duration silence{};
  // This peer's failure has been published. A failure the engine finds (a peer's abort, a ring
  // broken, a peer gone) is published by the engine at once: the owner may be computing, away
  // from the transport, and meanwhile this peer moves no data, so a neighbour waiting on it
  // would otherwise wait out its deadline and blame this peer instead of the cause. Under mu.
  bool relayed = false;

  std::string prefix() const { return rank_prefix(rank); }
  ShmPair& pair_for(int peer, const char* what);

  // Set-up (shm_connect.cc).
  void connect_all(const HostsFile& hosts, const std::vector<int>& peers);
  void connect_pairs(const HostsFile& hosts, const std::vector<int>& peers);  // connect_all's work

  // The engine (shm_engine.cc). Each returns whether it moved anything; callers hold mu.
  bool progress_all();
  bool progress(ShmPair& p);
  bool push_sends(ShmPair& p);
  bool pull(ShmPair& p);
  bool pull_message(ShmPair& p, const shm::SlotHeader& h);
  bool pull_early(ShmPair& p, const shm::SlotHeader& h);
  void read_direct(ShmPair& p, const shm::SlotHeader& h, std::byte* data, std::size_t size);
  // A receive just posted: taken from the early queue when its message is there.
  bool take_early(ShmPair& p, uint32_t index);
  // The early message being copied in is whole: a receive posted meanwhile takes it.
  void early_done(ShmPair& p);
  void finish_sends_to_gone(ShmPair& p);
  void wake(ShmPair& p);
  void beat();
  // Without mu: reads every socket that has something (its end) and updates `gone`; true if one
  // did.
  bool check_sockets(int timeout_ms);
  // Sleeps until a peer rings, a socket ends, or `until` (at most one heartbeat period).
  void sleep_until(std::chrono::steady_clock::time_point until);
  void run_progress_thread();

  // Liveness and failures (shm_transport.cc).
  OpTable::PeerState liveness(int peer) const;
  std::string process_state(const ShmPair& p) const;
  void broken(ShmPair& p, const std::string& why);
  // Writes this peer's failure into every pair (where none is yet) and rings each peer.
  void publish_abort(const std::string& text);
  void publish_abort_locked(const std::string& text);  // the caller holds mu
  std::string gather_reports(const std::string& own);
  void shutdown(bool unwinding);
};

}  // namespace dpg::net
