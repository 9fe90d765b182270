// The I/O engine: per connection one reader (tcp_reader.cc) and one writer. With the progress
// thread they run on it and the training thread only posts operations and waits on their slots;
// without it (the default) the thread that posts or waits runs them itself.
#include "runtime/net/tcp/tcp_transport.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <future>
#include <memory>

#include "runtime/core/log.h"
#include "runtime/net/tcp/tcp_impl.h"

namespace dpg::net {
namespace {

using boost::system::error_code;
using Clock = std::chrono::steady_clock;

// Writes the two pieces as far as the socket takes them now; returns the bytes written (0 when
// it is full).
std::size_t write_now(Conn& c, std::span<const std::byte> a, std::span<const std::byte> b,
                      error_code& ec) {
  iovec iov[2] = {{const_cast<std::byte*>(a.data()), a.size()},
                  {const_cast<std::byte*>(b.data()), b.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = b.empty() ? 1 : 2;
  for (;;) {
    const ssize_t n = ::sendmsg(c.socket.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      ec = error_code(errno, boost::system::system_category());
    }
    return 0;
  }
}

}  // namespace

TcpTransport::Impl::Impl(int r, int w, TcpOptions o)
    : rank(r), world(w), options(o), ops(r, o.timeout, o.spin_us) {
  driver = [this](const OpSlot& op, Clock::time_point until, bool block) {
    if (block) {
      io.run_one_until(until);
      last_poll = Clock::now();
      return;
    }
    // A receive reads its peer's socket directly, without the reactor's round trip. The reactor
    // runs for a send (whose rest it writes), while any send is being written, and otherwise at
    // least every millisecond, for the other connections and the heartbeats.
    const bool recv = op.kind == OpKind::recv && conns[op.peer];
    if (recv && pump(*conns[op.peer])) return;
    const auto now = Clock::now();
    // TLS: received bytes arrive through the reactor (the stream's reads), so it always runs.
    bool writing = !recv || options.tls;
    for (const auto& c : conns) writing = writing || (c && c->writing);
    if (writing || now - last_poll > std::chrono::milliseconds(1)) {
      io.poll();
      last_poll = now;
    }
  };
  beat_every = std::clamp<Clock::duration>(o.timeout / 8, std::chrono::milliseconds(5),
                                           std::chrono::seconds(1));
  silence = o.timeout / 2;
  ops.watch([this](int peer) { return liveness(peer); }, silence);
  ops.watch_held([this](int peer) -> std::string {
    if (peer < 0 || peer >= world || !conns[peer]) return {};
    return conns[peer]->held();
  });
}

// ---- liveness ----

void TcpTransport::Impl::heard_from(Conn& c) {
  c.heard.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

OpTable::PeerState TcpTransport::Impl::liveness(int peer) const {
  OpTable::PeerState p;
  if (peer < 0 || peer >= world || !conns[peer]) return p;
  const Conn& c = *conns[peer];
  p.waiting = c.peer_waiting.load(std::memory_order_relaxed);
  if (c.parked_now.load(std::memory_order_relaxed)) return p;
  p.silent_for =
      Clock::now() - Clock::time_point(Clock::duration(c.heard.load(std::memory_order_relaxed)));
  return p;
}

void TcpTransport::Impl::schedule_beat() {
  beat_timer.expires_after(beat_every);
  beat_timer.async_wait([this](error_code ec) {
    if (ec || ops.poisoned()) return;
    for (auto& c : conns) {
      if (!c || c->writing || c->control_pending || c->eof) continue;
      c->beat_pending = true;
      start_write(*c);
    }
    schedule_beat();
  });
}

Conn& TcpTransport::Impl::conn_for(int peer, const char* what) {
  if (peer < 0 || peer >= world || !conns[peer]) {
    dpg::fail(Code::invalid_argument, prefix() + what + " peer " + std::to_string(peer) +
                                     ": this peer has no connection to it");
  }
  return *conns[peer];
}

// ---- writer ----

void TcpTransport::Impl::enqueue_send(uint32_t index) {
  Conn& c = *conns[ops.slot(index).peer];
  ops.append(c.send_head, c.send_tail, index);
  if (!c.writing) start_write(c);
}

// The send at the head of the queue is all written: it completes and leaves the queue.
void TcpTransport::Impl::send_done(Conn& c) {
  ops.complete(ops.take_front(c.send_head, c.send_tail));
}

std::pair<std::span<const std::byte>, std::span<const std::byte>> TcpTransport::Impl::unsent(
    const Conn& c) {
  if (!c.rest.empty()) return {std::span<const std::byte>(c.rest).subspan(c.sent), {}};
  const OpSlot& s = ops.slot(c.send_head);
  const std::size_t of_header = std::min(c.sent, kHeaderBytes);
  return {std::span<const std::byte>(s.header).subspan(of_header),
          std::span<const std::byte>(s.data, s.size).subspan(c.sent - of_header)};
}

// The head frame is all handed on. A frame finished from its copy (rest) is a send whose wait
// has already failed: its slot completes all the same, as nobody will wait on it.
void TcpTransport::Impl::frame_done(Conn& c) {
  c.sent = 0;
  std::vector<std::byte>().swap(c.rest);
  send_done(c);
}

void TcpTransport::Impl::start_write(Conn& c) {
  if (c.writing || c.cut) return;
  // Data frames go out straight away while the socket takes them; the reactor writes the rest.
  // Once the transport has failed no new data frame starts (its buffer may already be gone);
  // only a frame already begun is finished (from its copy, once a failed wait has made one),
  // then the control frame that says why.
  while (c.send_head != kNone && (!ops.poisoned() || c.sent > 0 || !c.rest.empty())) {
    if (c.tls) return write_tls(c);
    const auto [head, body] = unsent(c);
    error_code ec;
    const std::size_t wrote = write_now(c, head, body, ec);
    if (ec) return lost(c, "sending", ec);
    if (wrote == head.size() + body.size()) {
      frame_done(c);
      continue;
    }
    // The reactor writes the rest as the socket takes it. Its write reads the caller's buffer
    // until it ends: a failed wait cancels it (detach_sends), and it goes on from the copy.
    c.sent += wrote;
    c.writing = c.writing_data = true;
    const std::array<asio::const_buffer, 2> bufs = {
        asio::buffer(head.data() + wrote, head.size() - std::min(wrote, head.size())),
        asio::buffer(body.data() + (wrote > head.size() ? wrote - head.size() : 0),
                     body.size() - (wrote > head.size() ? wrote - head.size() : 0))};
    asio::async_write(c.socket, bufs, [this, &c](error_code ec, std::size_t n) {
      c.writing = c.writing_data = false;
      if (ec == asio::error::operation_aborted && !c.rest.empty() && !c.cut) {
        c.sent = n;  // cancelled by detach_sends: the rest of the frame is in c.rest
        return start_write(c);
      }
      if (ec) return lost(c, "sending", ec);
      frame_done(c);
      start_write(c);
    });
    return;
  }
  if (ops.poisoned() && !c.control_pending) return;
  if (c.beat_pending && !c.control_pending) {
    c.beat_pending = false;
    c.writing = true;
    encode_header(FrameHeader{FrameKind::heartbeat, Tag{ops.waiting() ? 1u : 0u, 0, 0}, 0},
                  c.beat_header);
    c.write_all(asio::buffer(c.beat_header), [this, &c](error_code ec, std::size_t) {
      c.writing = false;
      if (ec) return lost(c, "sending", ec);
      start_write(c);
    });
    return;
  }
  if (c.control_pending && !c.control_sent) {
    c.writing = true;
    std::array<asio::const_buffer, 2> bufs = {asio::buffer(c.control_header),
                                              asio::buffer(c.control_payload)};
    c.write_all(bufs, [&c](error_code, std::size_t) {
      c.writing = false;
      c.control_sent = true;
    });
  }
}

// TLS: the next piece of the head frame is copied into tls_out and written from there, so that
// the stream's write in flight never holds the caller's memory.
void TcpTransport::Impl::write_tls(Conn& c) {
  const auto [head, body] = unsent(c);
  if (head.empty() && body.empty()) {
    frame_done(c);
    return start_write(c);
  }
  if (!c.tls_out) c.tls_out = std::make_unique<std::byte[]>(Conn::kTlsOutBytes);
  const std::size_t h = std::min(head.size(), Conn::kTlsOutBytes);
  const std::size_t b = std::min(body.size(), Conn::kTlsOutBytes - h);
  if (h > 0) std::memcpy(c.tls_out.get(), head.data(), h);
  if (b > 0) std::memcpy(c.tls_out.get() + h, body.data(), b);
  c.sent += h + b;
  c.writing = true;
  c.write_all(asio::buffer(c.tls_out.get(), h + b), [this, &c](error_code ec, std::size_t) {
    c.writing = false;
    if (ec) return lost(c, "sending", ec);
    start_write(c);
  });
}

void TcpTransport::Impl::detach_sends(bool copy) {
  auto detach = [this, copy] {
    for (auto& cp : conns) {
      if (!cp || cp->cut || cp->send_head == kNone || cp->sent == 0 || !cp->rest.empty()) continue;
      Conn& c = *cp;
      const auto [head, body] = unsent(c);
      if (head.empty() && body.empty()) continue;  // all handed on: nothing more is read
      if (!copy) {
        c.cut = true;
        error_code ignored;
        c.socket.close(ignored);
        continue;
      }
      c.rest.reserve(head.size() + body.size());
      c.rest.assign(head.begin(), head.end());
      c.rest.insert(c.rest.end(), body.begin(), body.end());
      c.sent = 0;
      if (c.writing_data) {
        // The reactor's write from the caller's buffer stops here; its handler learns how much
        // of the copy it had written. The reader's readiness wait is cancelled with it and is
        // armed again (arm).
        c.rearm_read = c.wait_armed;
        error_code ignored;
        c.socket.cancel(ignored);
      }
    }
  };
  on_io_now(detach);
}

void TcpTransport::Impl::on_io_now(const std::function<void()>& fn) {
  if (!options.progress_thread) return fn();
  auto done = std::make_shared<std::promise<void>>();
  auto ran = done->get_future();
  asio::post(io, [fn, done] {
    fn();
    done->set_value();
  });
  ran.wait_for(std::chrono::seconds(1));
}

void TcpTransport::Impl::abandon(Code code, const std::string& message) {
  on_io_now([this, code, message] { fail_io(code, message); });
  ops.poison(code, message);  // where the I/O thread has died: it moves nothing any more
  detach_sends(true);
}

// ---- reader ----

void TcpTransport::Impl::enqueue_recv(uint32_t index) {
  Conn& c = *conns[ops.slot(index).peer];
  if (!c.early.empty()) {
    OpSlot& r = ops.slot(index);
    const auto it = c.early.find(r.tag);
    if (it != c.early.end() && it->complete) {
      if (ops.poisoned()) return;  // failed: nothing more moves into its buffers
      const std::string why = c.early.deliver(it, c.peer, r.data, r.size);
      if (!why.empty()) return fail_io(Code::data_loss, prefix() + why);
      ops.complete(index);
      // The queue has room again for a frame held back.
      if (c.reading == Conn::Reading::parked && match(c)) pump(c);
      return;
    }
  }
  ops.append(c.recv_head, c.recv_tail, index);
  if (c.reading == Conn::Reading::parked && match(c)) pump(c);
  // After a goodbye (which pump may have just read) no receive can be met any more.
  if (c.bye_received && c.recv_head != kNone) closed_early(c);
}

void TcpTransport::Impl::lost(Conn& c, const std::string& what, const error_code& ec) {
  if (ec == asio::error::operation_aborted) return;
  // A TLS peer that closes its socket after its bye, without TLS's own close, reads as a
  // truncated stream; the bye inside the stream already said it was finished.
  if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated) c.eof = true;
  if (c.eof && c.bye_received) {
    if (c.recv_head != kNone) closed_early(c);
    return;  // a clean goodbye
  }
  fail_io(Code::unavailable, prefix() + "connection to peer " + std::to_string(c.peer) +
                                 " lost while " + what + " (" + tls_message(ec, &c) +
                                 "); that peer stopped or its network failed");
}

void TcpTransport::Impl::closed_early(Conn& c) {
  fail_io(Code::aborted, prefix() + "peer " + std::to_string(c.peer) +
                             " has finished and said goodbye, but a receive from it is "
                             "still posted: that peer stopped early");
}

std::string TcpTransport::Impl::gather_reports(const std::string& own) {
  on_io([this, own] { send_control(FrameKind::abort, own); });
  const auto grace = std::min<Clock::duration>(std::chrono::seconds(1), options.timeout / 4);
  const auto until = Clock::now() + grace;
  std::size_t expected = 0;
  for (auto& c : conns) expected += c ? 1 : 0;
  while (Clock::now() < until) {
    {
      std::lock_guard lock(reports_mu);
      if (reports.size() >= expected) break;
    }
    if (options.progress_thread) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } else {
      io.run_one_for(std::chrono::milliseconds(10));
    }
  }
  std::string message = own;
  std::lock_guard lock(reports_mu);
  for (const auto& r : reports) message += "\n  " + r;
  // A peer that has sent nothing, not even a heartbeat, for `silence` is the likely cause.
  std::string silent;
  for (auto& c : conns) {
    if (!c || c->eof) continue;
    const auto quiet = liveness(c->peer).silent_for;
    if (quiet < silence) continue;
    silent += (silent.empty() ? "" : ", ") + std::to_string(c->peer) + " (nothing for " +
              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(quiet).count()) +
              " ms)";
  }
  if (!silent.empty()) {
    message += "\n  silent: peer " + silent + "; stopped or hung (the likely cause)";
  }
  return message;
}

// ---- shutdown ----

void TcpTransport::Impl::send_control(FrameKind kind, const std::string& payload) {
  for (auto& cp : conns) {
    if (!cp || cp->control_pending) continue;
    cp->control_payload = payload.substr(0, kMaxAbortBytes);
    encode_header(FrameHeader{kind, Tag{}, cp->control_payload.size()}, cp->control_header);
    cp->control_pending = true;
    if (!cp->writing) start_write(*cp);
  }
}

void TcpTransport::Impl::fail_io(Code code, const std::string& message) {
  ops.poison(code, message);
  send_control(FrameKind::abort, ops.report());  // once: a connection's control frame is set once
}

bool TcpTransport::Impl::control_flushed() const {
  for (auto& c : conns) {
    if (c && !c->control_sent && !c->eof && !c->cut) return false;
  }
  return true;
}

void TcpTransport::Impl::shutdown(bool unwinding) {
  if (unwinding) {
    ops.poison(Code::aborted, prefix() + "stopped on an error of its own (see its log)");
    // The owner's buffers may be gone already (destroyed before the transport as the stack
    // unwinds): a send begun and not yet detached cannot be finished.
    detach_sends(false);
  }
  const bool clean = !ops.poisoned();
  on_io([this, clean] {
    send_control(clean ? FrameKind::bye : FrameKind::abort, clean ? "" : ops.report());
  });
  // Wait (bounded) until our goodbye is written and, when clean, every peer's has arrived, so
  // that closing never cuts off data a peer still has to read.
  const auto limit = Clock::now() + (clean ? std::chrono::milliseconds(5000)
                                           : std::chrono::milliseconds(300));
  auto finished = [this, clean] {
    bool done = control_flushed();
    if (clean && !ops.poisoned()) {
      for (auto& c : conns) done = done && (!c || c->bye_received || c->eof);
    }
    return done;
  };
  while (Clock::now() < limit) {
    if (!options.progress_thread) {
      if (finished()) break;
      io.run_one_for(std::chrono::milliseconds(10));
      continue;
    }
    std::promise<bool> p;
    auto f = p.get_future();
    asio::post(io, [&] { p.set_value(finished()); });
    if (f.wait_for(std::chrono::seconds(1)) != std::future_status::ready) break;
    if (f.get()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  io.stop();
  if (thread.joinable()) thread.join();
  error_code ignored;
  for (auto& c : conns) {
    if (c) c->socket.close(ignored);
  }
}

// ---- the public face ----

TcpTransport::TcpTransport(const HostsFile& hosts, int rank, const std::vector<int>& peers,
                           TcpOptions options)
    : impl_(std::make_unique<Impl>(rank, hosts.world(), options)) {
  const log::RankScope scope(rank);  // the set-up's log lines (log.h)
  if (rank < 0 || rank >= hosts.world()) {
    dpg::fail(Code::invalid_argument, "rank " + std::to_string(rank) + " is outside the hosts list of " +
                                     std::to_string(hosts.world()) + " peers");
  }
  Impl& t = *impl_;
  if (t.options.handshake_timeout.count() <= 0) {
    t.options.handshake_timeout = handshake_bound(t.options.connect_timeout);
  }
  t.secret = hosts.secret;
  t.secret_origin = hosts.secret_origin.empty() ? "the hosts list" : hosts.secret_origin;
  if (t.options.tls) t.tls_context = make_tls_context(hosts, rank);
  impl_->connect_all(hosts, peers);
  for (auto& c : impl_->conns) {
    if (!c) continue;
    Impl::heard_from(*c);
    impl_->pump(*c);
  }
  impl_->schedule_beat();
  impl_->work.emplace(asio::make_work_guard(impl_->io));
  if (!impl_->options.progress_thread) return;
  impl_->thread = std::thread([impl = impl_.get()] {
    try {
      impl->io.run();
    } catch (const std::exception& e) {
      impl->ops.poison(Code::internal, impl->prefix() + "I/O thread failed: " + e.what());
    }
  });
}

TcpTransport::~TcpTransport() {
  const log::RankScope scope(impl_->rank);
  try {
    impl_->shutdown(std::uncaught_exceptions() > 0);
  } catch (const std::exception& e) {
    DPG_WARN("closing the transport: " << e.what());
  }
}

int TcpTransport::rank() const { return impl_->rank; }
int TcpTransport::world() const { return impl_->world; }
std::chrono::milliseconds TcpTransport::timeout() const { return impl_->options.timeout; }

Handle TcpTransport::send(int peer, Tag tag, std::span<const std::byte> data) {
  refusing(*this, [&] {
    impl_->conn_for(peer, "send to");
    if (data.size() > kMaxDataBytes) {
      dpg::fail(Code::invalid_argument, impl_->prefix() + "send to peer " + std::to_string(peer) +
                                            " of " + std::to_string(data.size()) +
                                            " bytes: one message carries at most " +
                                            std::to_string(kMaxDataBytes));
    }
  });
  Handle h = impl_->ops.post(OpKind::send, peer, tag, const_cast<std::byte*>(data.data()),
                             data.size());
  encode_header(FrameHeader{FrameKind::data, tag, data.size()}, impl_->ops.slot(h.slot).header);
  impl_->on_io([impl = impl_.get(), i = h.slot] { impl->enqueue_send(i); });
  return h;
}

Handle TcpTransport::recv(int peer, Tag tag, std::span<std::byte> data) {
  refusing(*this, [&] { impl_->conn_for(peer, "receive from"); });
  Handle h = impl_->ops.post(OpKind::recv, peer, tag, data.data(), data.size());
  impl_->on_io([impl = impl_.get(), i = h.slot] { impl->enqueue_recv(i); });
  return h;
}

void TcpTransport::poison(Code code, const std::string& message) { impl_->abandon(code, message); }

void TcpTransport::wait(Handle handle) {
  try {
    impl_->ops.wait(handle, impl_->options.progress_thread ? nullptr : &impl_->driver);
  } catch (const Error& e) {
    // From here on the caller may free or reuse the buffers of everything it posted.
    if (impl_->ops.poisoned()) impl_->detach_sends(true);
    // A timeout here or a peer's abort: find out from the others who stalled.
    if (e.code() != Code::deadline_exceeded && e.code() != Code::aborted) throw;
    throw Error(e.code(), impl_->gather_reports(e.what()));
  }
}

}  // namespace dpg::net
