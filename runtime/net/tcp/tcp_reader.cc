// The reader of each connection: non-blocking reads driven by the reactor's readiness waits, or
// straight from the waiting thread. A read at a frame boundary goes into a small stage, so that a
// header and a small payload (and whatever follows) cost one system call; the rest of a large
// payload goes straight into the receiver's buffer. With no receive posted for a frame, its payload
// is copied into the connection's early queue (within its bound) and reading goes on; a frame past
// the bound stays parked and the connection is not read further: TCP pushes back on the sender.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/net/tcp/tcp_impl.h"

namespace dpg::net {
using boost::system::error_code;

void TcpTransport::Impl::stop_reading(Conn& c, const error_code& ec) {
  c.reading = Conn::Reading::stopped;
  lost(c, "receiving", ec);
}

// Reads without blocking. Returns the bytes read; 0 when none came, and then a readiness wait is
// armed (the socket is empty) or reading has stopped (end of stream or an error).
std::size_t TcpTransport::Impl::read_now(Conn& c, std::byte* into, std::size_t n) {
  if (c.tls) {
    // TLS: what the stream has decrypted, read ahead by arm().
    const std::size_t got = std::min(n, c.tls_end - c.tls_begin);
    if (got == 0) {
      arm(c);
      return 0;
    }
    std::memcpy(into, c.tls_in.get() + c.tls_begin, got);
    c.tls_begin += got;
    return got;
  }
  for (;;) {
    const ssize_t got = ::recv(c.socket.native_handle(), into, n, MSG_DONTWAIT);
    if (got > 0) {
      heard_from(c);
      return static_cast<std::size_t>(got);
    }
    if (got == 0) {
      stop_reading(c, boost::asio::error::eof);
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      arm(c);
    } else {
      stop_reading(c, error_code(errno, boost::system::system_category()));
    }
    return 0;
  }
}

void TcpTransport::Impl::arm(Conn& c) {
  if (c.wait_armed) return;
  c.wait_armed = true;
  if (c.tls) {
    // A TLS stream has no readiness to wait for: its read decrypts into tls_in, then the reader
    // goes on from there.
    c.tls->async_read_some(asio::buffer(c.tls_in.get(), Conn::kTlsInBytes),
                           [this, &c](error_code ec, std::size_t got) {
                             c.wait_armed = false;
                             if (ec) return stop_reading(c, ec);
                             heard_from(c);
                             c.tls_begin = 0;
                             c.tls_end = got;
                             pump(c);
                           });
    return;
  }
  c.socket.async_wait(tcp::socket::wait_read, [this, &c](error_code ec) {
    c.wait_armed = false;
    if (ec == asio::error::operation_aborted && c.rearm_read && !c.cut) {
      c.rearm_read = false;  // cancelled with a send by detach_sends, not stopped
      return arm(c);
    }
    if (ec) return stop_reading(c, ec);
    pump(c);
  });
}

// Tops up the stage from the socket. False when nothing came: then a wait is armed, or the
// connection is gone.
bool TcpTransport::Impl::fill_stage(Conn& c) {
  if (c.stage_begin > 0) {
    std::memmove(c.stage.get(), c.stage.get() + c.stage_begin, c.stage_end - c.stage_begin);
    c.stage_end -= c.stage_begin;
    c.stage_begin = 0;
  }
  // When the oldest posted receive will not fit, read only up to the header: its payload then
  // goes straight to its buffer, with no second copy out of the stage.
  std::size_t want = Conn::kStageBytes - c.stage_end;
  if (c.recv_head != kNone && ops.slot(c.recv_head).size > Conn::kStageBytes - kHeaderBytes) {
    want = kHeaderBytes - c.stage_end;
  }
  const std::size_t got = read_now(c, c.stage.get() + c.stage_end, want);
  c.stage_end += got;
  return got > 0;
}

bool TcpTransport::Impl::pump(Conn& c) {
  bool completed = false;
  for (;;) {
    switch (c.reading) {
      case Conn::Reading::stopped:
      case Conn::Reading::parked:
        return completed;
      case Conn::Reading::header: {
        if (c.stage_end - c.stage_begin < kHeaderBytes) {
          if (!fill_stage(c)) return completed;
          continue;
        }
        HeaderBytes bytes;
        std::memcpy(bytes.data(), c.stage.get() + c.stage_begin, kHeaderBytes);
        c.stage_begin += kHeaderBytes;
        std::string why;
        const auto h = decode_header(bytes, why);
        if (!h) {
          malformed(c, why);
          return completed;
        }
        on_header(c, *h);
        continue;
      }
      case Conn::Reading::payload:
      case Conn::Reading::abort_text: {
        // Once the transport has failed, a payload is read and dropped: the receive it was
        // meant for has failed with everything else, and its buffer may already be gone.
        if (c.reading == Conn::Reading::payload && c.dst != nullptr && ops.poisoned()) {
          c.dst = nullptr;
          c.target = kNone;
        }
        const std::size_t staged = std::min(c.left, c.stage_end - c.stage_begin);
        if (staged > 0) {
          if (c.dst != nullptr) {
            std::memcpy(c.dst, c.stage.get() + c.stage_begin, staged);
            c.dst += staged;
          }
          c.stage_begin += staged;
          c.left -= staged;
        }
        if (c.left > 0) {
          std::size_t got = 0;
          if (c.dst != nullptr) {
            got = read_now(c, c.dst, c.left);
            c.dst += got;
          } else {
            // Dropping: the stage is empty here, so it serves as the sink.
            c.stage_begin = c.stage_end = 0;
            got = read_now(c, c.stage.get(), std::min(c.left, Conn::kStageBytes));
          }
          if (got == 0) return completed;
          c.left -= got;
          continue;
        }
        if (c.reading == Conn::Reading::abort_text) {
          // Nothing is read after an abort: the peer is going away.
          c.reading = Conn::Reading::stopped;
          const std::string text(c.abort_text.begin(), c.abort_text.end());
          {
            std::lock_guard lock(reports_mu);
            reports.push_back("peer " + std::to_string(c.peer) + " reports: " + text);
          }
          fail_io(Code::aborted, "peer " + std::to_string(c.peer) + " aborted: " + text);
          return completed;
        }
        c.reading = Conn::Reading::header;
        if (c.to_early) {
          c.to_early = false;
          completed = early_done(c) || completed;
          continue;
        }
        if (c.target != kNone) {
          ops.complete(c.target);
          c.target = kNone;
          completed = true;
        }
        continue;
      }
    }
  }
}

void TcpTransport::Impl::on_header(Conn& c, const FrameHeader& h) {
  switch (h.kind) {
    case FrameKind::bye:
      c.bye_received = true;
      if (c.recv_head != kNone) {
        c.reading = Conn::Reading::stopped;
        closed_early(c);
      }
      return;
    case FrameKind::abort:  // decode_header bounded its length by kMaxAbortBytes
      c.abort_text.resize(h.length);
      c.dst = reinterpret_cast<std::byte*>(c.abort_text.data());
      c.left = h.length;
      c.reading = Conn::Reading::abort_text;
      return;
    case FrameKind::heartbeat:
      c.peer_waiting.store(h.tag.op == 1, std::memory_order_relaxed);
      return;
    case FrameKind::data:
      c.frame = h;
      c.reading = Conn::Reading::parked;
      match(c);
      return;
    case FrameKind::hello:
    case FrameKind::challenge:
    case FrameKind::proof:
      return malformed(c, std::string("a ") + to_string(h.kind) + " frame after the handshake");
  }
}

// A frame that fails its checks: nothing more is read from that peer (its stream can no longer
// be trusted to be in step), the connection's receive side is shut and the transport fails
// naming the peer.
void TcpTransport::Impl::malformed(Conn& c, const std::string& why) {
  c.reading = Conn::Reading::stopped;
  error_code ignored;
  c.socket.shutdown(tcp::socket::shutdown_receive, ignored);
  fail_io(Code::data_loss,
          prefix() + "peer " + std::to_string(c.peer) + " sent a malformed frame: " + why);
}

// Pairs the parked header with the posted receive of the same tag and checks the length before
// touching any memory. Returns whether the reader can go on.
bool TcpTransport::Impl::match(Conn& c) {
  const FrameHeader& h = c.frame;
  if (ops.poisoned()) {
    // Failed: nothing more is delivered (the receives have failed and their buffers may be
    // gone), but the frames are still read, so that an abort behind them arrives.
    c.parked_now.store(false, std::memory_order_relaxed);
    c.reading = Conn::Reading::payload;
    c.dst = nullptr;
    c.left = h.length;
    c.target = kNone;
    return true;
  }
  uint32_t prev = kNone, i = c.recv_head;
  while (i != kNone && !(ops.slot(i).tag == h.tag)) {
    prev = i;
    i = ops.slot(i).next;
  }
  c.parked_now.store(false, std::memory_order_relaxed);
  if (i == kNone) {
    if (!c.early.fits(h.length)) {
      // Past the bound: parked, and the connection is not read on (back-pressure).
      c.parked_now.store(true, std::memory_order_relaxed);
      c.set_held(held_back(c.peer, h.tag, h.length, c.early));
      return false;
    }
    c.early_at = c.early.add(h.tag, h.length);
    c.to_early = true;
    c.reading = Conn::Reading::payload;
    c.dst = c.early_at->bytes.get();
    c.left = h.length;
    c.target = kNone;
    if (c.held_set) c.set_held({});
    return true;
  }
  if (c.held_set) c.set_held({});
  OpSlot& s = ops.slot(i);
  if (h.length != s.size) {
    c.reading = Conn::Reading::stopped;
    fail_io(Code::data_loss, prefix() + "peer " + std::to_string(c.peer) + " sent " +
                                 std::to_string(h.length) + " bytes for " + to_string(h.tag) +
                                 " but the receive expects " + std::to_string(s.size));
    return false;
  }
  (prev == kNone ? c.recv_head : ops.slot(prev).next) = s.next;
  if (c.recv_tail == i) c.recv_tail = prev;
  c.reading = Conn::Reading::payload;
  c.dst = s.data;
  c.left = s.size;
  c.target = i;
  return true;
}


bool TcpTransport::Impl::early_done(Conn& c) {
  const auto e = c.early_at;
  e->complete = true;
  if (ops.poisoned()) return false;
  uint32_t prev = kNone, i = c.recv_head;
  while (i != kNone && !(ops.slot(i).tag == e->tag)) {
    prev = i;
    i = ops.slot(i).next;
  }
  if (i == kNone) return false;
  OpSlot& s = ops.slot(i);
  (prev == kNone ? c.recv_head : ops.slot(prev).next) = s.next;
  if (c.recv_tail == i) c.recv_tail = prev;
  const std::string why = c.early.deliver(e, c.peer, s.data, s.size);
  if (!why.empty()) {
    c.reading = Conn::Reading::stopped;
    fail_io(Code::data_loss, prefix() + why);
    return false;
  }
  ops.complete(i);
  return true;
}

}  // namespace dpg::net
