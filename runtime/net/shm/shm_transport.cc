// The public face of the shared-memory transport, liveness, failures and shutdown. The engine
// that moves bytes is shm_engine.cc, the set-up shm_connect.cc.
#include "runtime/net/shm/shm_transport.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <fstream>
#include <thread>

#include "runtime/core/log.h"
#include "runtime/net/shm/shm_impl.h"

namespace dpg::net {
namespace {

using Clock = std::chrono::steady_clock;

// Tells the core this is a spin-wait (frees the sibling hyper-thread, saves power).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd >= 0) ::close(fd);
    fd = o.fd;
    o.fd = -1;
  }
  return *this;
}

Fd::~Fd() {
  if (fd >= 0) ::close(fd);
}

Mapping& Mapping::operator=(Mapping&& o) noexcept {
  if (this != &o) {
    if (base) ::munmap(base, bytes);
    base = o.base;
    bytes = o.bytes;
    o.base = nullptr;
  }
  return *this;
}

Mapping::~Mapping() {
  if (base) ::munmap(base, bytes);
}

ShmTransport::Impl::Impl(int r, int w, ShmOptions o)
    : rank(r), world(w), options(o), ops(r, o.timeout, o.spin_us) {
  driver = [this](const OpSlot& op, Clock::time_point until, bool block) {
    if (block) {
      sleep_until(until);
      progress_all();
      return;
    }
    // Busy first (no system call) while the awaited peer is running, which its heartbeat of
    // the last microseconds shows: its message is then about to land, and yielding would hand
    // the core to another process. A peer not seen running for busy_poll may be waiting for
    // this very core: then yield at once.
    const auto busy_until = Clock::now() + busy_poll;
    const shm::SideState* peer = pairs[op.peer] ? &pairs[op.peer]->view.theirs() : nullptr;
    while (!progress_all() && op.state.load(std::memory_order_acquire) != OpSlot::done &&
           !ops.poisoned() && peer) {
      const auto now = Clock::now();
      const auto beat = Clock::time_point(Clock::duration(peer->beat_ns.load(std::memory_order_relaxed)));
      if (now >= busy_until || now - beat > busy_poll) break;
      cpu_relax();
    }
    // A peer's death shows on its socket; look every millisecond while spinning (sleeping
    // polls the sockets anyway).
    const auto now = Clock::now();
    if (now - last_check > std::chrono::milliseconds(1)) {
      last_check = now;
      if (check_sockets(0)) progress_all();
    }
  };
  beat_every = std::clamp<Clock::duration>(o.timeout / 8, std::chrono::milliseconds(5),
                                           std::chrono::seconds(1));
  silence = o.timeout / 2;
  ops.watch([this](int peer) { return liveness(peer); }, silence);
  ops.watch_held([this](int peer) -> std::string {
    if (peer < 0 || peer >= world || !pairs[peer]) return {};
    return pairs[peer]->held();
  });
}

ShmPair& ShmTransport::Impl::pair_for(int peer, const char* what) {
  if (peer < 0 || peer >= world || !pairs[peer]) {
    fail(Code::invalid_argument, prefix() + what + " peer " + std::to_string(peer) +
                                     ": this peer has no shared-memory connection to it");
  }
  return *pairs[peer];
}

// ---- liveness ----

std::string ShmTransport::Impl::process_state(const ShmPair& p) const {
  std::ifstream in("/proc/" + std::to_string(p.pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const auto close = stat.rfind(')');
  const std::string pid = "process " + std::to_string(p.pid);
  if (close == std::string::npos || close + 2 >= stat.size()) return pid + " has exited";
  switch (stat[close + 2]) {
    case 'T':
    case 't':
      return pid + " is stopped (a SIGSTOP or a debugger)";
    case 'Z':
    case 'X':
      return pid + " has exited";
    case 'D':
      return pid + " is in an uninterruptible wait";
    default:
      return pid + " is running";
  }
}

OpTable::PeerState ShmTransport::Impl::liveness(int peer) const {
  OpTable::PeerState s;
  if (peer < 0 || peer >= world || !pairs[peer]) return s;
  const ShmPair& p = *pairs[peer];
  s.waiting = p.view.theirs().waiting.load(std::memory_order_relaxed) != 0;
  if (p.parked_now.load(std::memory_order_relaxed)) return s;  // it is ahead, not silent
  const int64_t beat = p.view.theirs().beat_ns.load(std::memory_order_relaxed);
  if (beat == 0) {
    // It never wrote a heartbeat: say so, rather than the time since the clock's epoch.
    s.silent_for = silence;
    s.note = "never heard from; " + process_state(p);
    return s;
  }
  s.silent_for = Clock::now() - Clock::time_point(Clock::duration(beat));
  if (s.silent_for >= silence) s.note = process_state(p);
  return s;
}

// ---- failures ----

void ShmTransport::Impl::broken(ShmPair& p, const std::string& why) {
  ops.poison(Code::data_loss, prefix() + "peer " + std::to_string(p.peer) +
                                  " broke the shared-memory ring: " + why);
}

void ShmTransport::Impl::publish_abort(const std::string& text) {
  std::lock_guard lock(mu);
  publish_abort_locked(text);
}

void ShmTransport::Impl::publish_abort_locked(const std::string& text) {
  relayed = true;
  const std::size_t n = std::min(text.size(), shm::kAbortBytes);
  for (ShmPair* p : live) {
    shm::SideState& mine = p->view.mine();
    if (mine.abort_len.load(std::memory_order_relaxed) != 0) continue;
    std::memcpy(mine.abort_text, text.data(), n);
    mine.abort_len.store(static_cast<uint32_t>(std::max<std::size_t>(n, 1)),
                         std::memory_order_release);
    wake(*p);
  }
}

std::string ShmTransport::Impl::gather_reports(const std::string& own) {
  publish_abort(own);
  const auto until = Clock::now() + std::min<Clock::duration>(std::chrono::seconds(1),
                                                              options.timeout / 4);
  std::string reports;
  for (;;) {
    reports.clear();
    bool all = true;  // every peer still there has reported
    {
      std::lock_guard lock(mu);
      for (ShmPair* p : live) {
        const uint32_t n = p->view.theirs().abort_len.load(std::memory_order_acquire);
        if (n == 0) {
          all = all && (p->gone || p->bye_received);
          continue;
        }
        reports += "\n  " + std::string(p->view.theirs().abort_text,
                                         std::min<std::size_t>(n, shm::kAbortBytes));
      }
    }
    if (all || Clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::string message = own + reports;
  std::string silent;
  for (ShmPair* p : live) {
    if (p->gone) continue;
    const OpTable::PeerState s = liveness(p->peer);
    if (s.silent_for < silence) continue;
    const std::string heard =
        s.note.rfind("never", 0) == 0
            ? std::string()
            : "nothing for " +
                  std::to_string(
                      std::chrono::duration_cast<std::chrono::milliseconds>(s.silent_for).count()) +
                  " ms; ";
    silent += (silent.empty() ? "peer " : ", peer ") + std::to_string(p->peer) + " (" + heard +
              s.note + ")";
  }
  if (!silent.empty()) {
    message += "\n  silent: " + silent + "; stopped or hung (the likely cause)";
  }
  return message;
}

// ---- shutdown ----

void ShmTransport::Impl::shutdown(bool unwinding) {
  if (unwinding) {
    ops.poison(Code::aborted, prefix() + "stopped on an error of its own (see its log)");
  }
  if (thread.joinable()) {
    stopping.store(true, std::memory_order_release);
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(doorbell.fd, &one, sizeof one);
    thread.join();
  }
  if (!ops.poisoned()) {
    // The goodbye goes behind the last message; what is in the ring stays readable after this
    // process has gone, so only the ring's room is waited for (bounded).
    {
      std::lock_guard lock(mu);
      for (ShmPair* p : live) p->bye_queued = true;
    }
    const auto limit = Clock::now() + std::chrono::seconds(5);
    for (;;) {
      progress_all();
      bool written = true;
      {
        std::lock_guard lock(mu);
        for (ShmPair* p : live) written = written && (p->bye_written || p->gone);
      }
      if (written || ops.poisoned() || Clock::now() >= limit) break;
      sleep_until(Clock::now() + std::chrono::milliseconds(10));
    }
  }
  if (ops.poisoned()) publish_abort(ops.report());
}

int resolved_busy_poll_us(const HostsFile& hosts, int rank, const ShmOptions& options) {
  if (options.busy_poll_us >= 0) return options.busy_poll_us;
  const std::string& here = hosts.peers[static_cast<std::size_t>(rank)].host;
  const auto local = std::count_if(hosts.peers.begin(), hosts.peers.end(),
                                   [&](const PeerAddress& p) { return p.host == here; });
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  return cpus > 0 && local > cpus ? 0 : 20;
}

// ---- the public face ----

ShmTransport::ShmTransport(const HostsFile& hosts, int rank, const std::vector<int>& peers,
                           ShmOptions options)
    : impl_(std::make_unique<Impl>(rank, hosts.world(), options)) {
  const log::RankScope scope(rank);  // the set-up's log lines (log.h)
  if (rank < 0 || rank >= hosts.world()) {
    fail(Code::invalid_argument, "rank " + std::to_string(rank) + " is outside the hosts list of " +
                                     std::to_string(hosts.world()) + " peers");
  }
  const std::string why = shm::check_sizes(options.slot_bytes, options.slots);
  if (!why.empty()) fail(Code::invalid_argument, "shared-memory rings: " + why);
  impl_->busy_poll = std::chrono::microseconds(resolved_busy_poll_us(hosts, rank, options));
  impl_->connect_all(hosts, peers);
  impl_->beat();
  if (!impl_->options.progress_thread) return;
  impl_->thread = std::thread([impl = impl_.get()] {
    try {
      impl->run_progress_thread();
    } catch (const std::exception& e) {
      impl->ops.poison(Code::internal, impl->prefix() + "progress thread failed: " + e.what());
    }
  });
}

ShmTransport::~ShmTransport() {
  const log::RankScope scope(impl_->rank);
  try {
    impl_->shutdown(std::uncaught_exceptions() > 0);
  } catch (const std::exception& e) {
    DPG_WARN("closing the shared-memory transport: " << e.what());
  }
}

int ShmTransport::rank() const { return impl_->rank; }
int ShmTransport::world() const { return impl_->world; }
std::chrono::milliseconds ShmTransport::timeout() const { return impl_->options.timeout; }

bool ShmTransport::direct_to(int peer) const {
  return impl_->pair_for(peer, "direct reads by").direct;
}

Handle ShmTransport::send(int peer, Tag tag, std::span<const std::byte> data) {
  ShmPair& p = refusing(*this, [&]() -> ShmPair& { return impl_->pair_for(peer, "send to"); });
  Handle h = impl_->ops.post(OpKind::send, peer, tag, const_cast<std::byte*>(data.data()),
                             data.size());
  std::lock_guard lock(impl_->mu);
  impl_->ops.append(p.send_head, p.send_tail, h.slot);
  impl_->progress(p);
  return h;
}

Handle ShmTransport::recv(int peer, Tag tag, std::span<std::byte> data) {
  ShmPair& p =
      refusing(*this, [&]() -> ShmPair& { return impl_->pair_for(peer, "receive from"); });
  Handle h = impl_->ops.post(OpKind::recv, peer, tag, data.data(), data.size());
  std::lock_guard lock(impl_->mu);
  if (!impl_->take_early(p, h.slot)) impl_->ops.append(p.recv_head, p.recv_tail, h.slot);
  // Also after taking one: the queue has room again for a message held back.
  impl_->progress(p);
  return h;
}

void ShmTransport::poison(Code code, const std::string& message) {
  // Under mu, as every pass of the engine that moves bytes: none is halfway through a copy, and
  // each checks the table before the next. Peers reading this process's memory directly learn
  // of it before the owner can free anything.
  std::lock_guard lock(impl_->mu);
  impl_->ops.poison(code, message);
  impl_->publish_abort_locked(impl_->ops.report());
}

void ShmTransport::wait(Handle handle) {
  // Noted while it waits: a receive from a peer that is gone can then be failed at once.
  struct Waiting {
    std::atomic<uint64_t>* at = nullptr;
    ~Waiting() {
      if (at) at->store(~uint64_t{0}, std::memory_order_release);
    }
  } waiting;
  const OpSlot* op = impl_->ops.find(handle);
  if (op && op->kind == OpKind::recv && impl_->pairs[op->peer]) {
    waiting.at = &impl_->pairs[op->peer]->waited_recv;
    waiting.at->store(uint64_t{handle.slot} << 32 | handle.generation, std::memory_order_release);
    std::lock_guard lock(impl_->mu);
    impl_->progress(*impl_->pairs[op->peer]);
  }
  try {
    impl_->ops.wait(handle, impl_->options.progress_thread ? nullptr : &impl_->driver);
  } catch (const Error& e) {
    // Peers learn of this failure before the caller can free any buffer a peer may still be
    // reading directly; after a timeout or an abort, the others say who stalled.
    if (e.code() != Code::deadline_exceeded && e.code() != Code::aborted) {
      impl_->publish_abort(e.what());
      throw;
    }
    throw Error(e.code(), impl_->gather_reports(e.what()));
  }
}

}  // namespace dpg::net
