// Private to runtime/net/tcp: the state behind TcpTransport. Everything in Conn is touched only
// by the thread that runs the I/O (the progress thread when there is one, else the one thread
// that uses the transport), except the atomics, which the waiting thread reads to tell a silent
// peer from a busy one.
#pragma once

#include <utility>  // Boost 1.74's Asio needs std::exchange declared first under g++ 12

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "runtime/net/early_queue.h"
#include "runtime/net/frame.h"
#include "runtime/net/op_table.h"
#include "runtime/net/tcp/tcp_transport.h"

namespace dpg::net {

namespace asio = boost::asio;
using asio::ip::tcp;

struct Conn : EarlyIn {
  // With a TLS context every byte goes through `tls`, a TLS stream over `socket`.
  Conn(asio::io_context& io, int p, asio::ssl::context* tls_context) : peer(p), socket(io) {
    if (tls_context != nullptr) {
      tls = std::make_unique<asio::ssl::stream<tcp::socket&>>(socket, *tls_context);
    }
  }
  int peer;
  tcp::socket socket;
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls;
  // TLS: bytes decrypted ahead, [tls_begin, tls_end) not yet taken by the reader (tcp_reader.cc).
  static constexpr std::size_t kTlsInBytes = 64 * 1024;
  std::unique_ptr<std::byte[]> tls_in;
  std::size_t tls_begin = 0, tls_end = 0;

  // Whole-buffer reads and writes through TLS when it is on.
  template <typename Buffers, typename Handler>
  void write_all(const Buffers& buffers, Handler&& handler) {
    if (tls) {
      asio::async_write(*tls, buffers, std::forward<Handler>(handler));
    } else {
      asio::async_write(socket, buffers, std::forward<Handler>(handler));
    }
  }
  template <typename Buffers, typename Handler>
  void read_all(const Buffers& buffers, Handler&& handler) {
    if (tls) {
      asio::async_read(*tls, buffers, std::forward<Handler>(handler));
    } else {
      asio::async_read(socket, buffers, std::forward<Handler>(handler));
    }
  }

  // Reader (tcp_reader.cc): bytes read ahead into `stage` ([stage_begin, stage_end) not yet
  // used), what the reader is in the middle of, and the posted receives.
  enum class Reading { header, payload, abort_text, parked, stopped };
  static constexpr std::size_t kStageBytes = kHeaderBytes + 64 * 1024;
  std::unique_ptr<std::byte[]> stage;  // allocated when the peer has joined
  std::size_t stage_begin = 0, stage_end = 0;
  Reading reading = Reading::header;
  FrameHeader frame;           // the frame being read, or parked until its receive is posted
  std::byte* dst = nullptr;    // where the rest of its payload goes
  std::size_t left = 0;        // payload bytes still to come
  uint32_t target = kNone;     // the receive it completes
  bool wait_armed = false;     // a readiness wait is pending in the reactor
  uint32_t recv_head = kNone, recv_tail = kNone;
  // (EarlyIn: frames that came before their receive, copied out within the bound.)
  std::vector<char> abort_text;
  bool bye_received = false;
  std::atomic<bool> eof{false};
  // Liveness: when anything (data, heartbeat, control) last arrived, in steady-clock ticks, and
  // whether a header waits for a receive not posted yet (then the peer is ahead, not silent).
  std::atomic<int64_t> heard{0};
  std::atomic<bool> parked_now{false};
  std::atomic<bool> peer_waiting{false};  // its training thread was in a wait at its last beat
  // Writer: posted sends in order, and one control frame (bye or abort) to go after them.
  uint32_t send_head = kNone, send_tail = kNone;
  bool writing = false;
  // The head send's frame bytes handed on so far (header included). Once a wait has failed the
  // caller's buffers are its own again, so a frame already begun goes on from `rest`, a copy of
  // what was left of it (detach_sends), and the control frame after it still arrives whole;
  // where no copy could be made (the owner unwinding, its buffers perhaps gone), the connection
  // is `cut`. Plain TCP's write in flight, which reads the caller's buffer, is cancelled then;
  // TLS copies each piece into tls_out first (a ring segment at a time), so its write in flight
  // never reads it.
  std::size_t sent = 0;
  std::vector<std::byte> rest;
  bool cut = false;
  bool writing_data = false;  // plain TCP: the reactor is writing the head frame from `sent` on
  bool rearm_read = false;    // detach_sends cancelled the reader's readiness wait
  static constexpr std::size_t kTlsOutBytes = kHeaderBytes + 256 * 1024;  // a ring segment
  std::unique_ptr<std::byte[]> tls_out;
  HeaderBytes control_header{};
  std::string control_payload;
  bool control_pending = false;
  bool control_sent = false;
  HeaderBytes beat_header{};
  bool beat_pending = false;
};

struct TcpTransport::Impl {
  Impl(int rank, int world, TcpOptions options);

  int rank;
  int world;
  TcpOptions options;
  OpTable ops;
  asio::io_context io;
  std::unique_ptr<asio::ssl::context> tls_context;  // with options.tls (tcp_tls.cc)
  std::string secret;         // the cluster secret (hosts file or DPGOSSIP_SECRET); empty: none
  std::string secret_origin;  // where it came from, for messages (never the secret itself)
  std::vector<std::unique_ptr<Conn>> conns;  // by peer rank; null for peers it does not talk to
  std::thread thread;  // runs io when options.progress_thread
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  OpTable::Driver driver;  // runs io on the waiting thread otherwise
  std::chrono::steady_clock::time_point last_poll{};
  // Heartbeats: every beat_every each idle connection gets a heartbeat frame (tag.op 1 when this
  // peer's training thread is in a wait, else 0), so that a peer silent for `silence` is known to
  // have stopped (or, without the progress thread, to be away from the network that long), and a
  // live one is known to be blocked on someone else or not.
  asio::steady_timer beat_timer{io};
  std::chrono::steady_clock::duration beat_every{};
  std::chrono::steady_clock::duration silence{};
  void schedule_beat();
  static void heard_from(Conn& c);
  OpTable::PeerState liveness(int peer) const;

  // Runs fn on the I/O side: posted to the I/O thread, or called right here.
  template <typename F>
  void on_io(F&& fn) {
    if (options.progress_thread) {
      asio::post(io, std::forward<F>(fn));
    } else {
      fn();
    }
  }

  std::string prefix() const { return rank_prefix(rank); }
  Conn& conn_for(int peer, const char* what);

  // Set-up (tcp_connect.cc): runs the io_context on the calling thread until every connection
  // is made and checked (tcp_handshake.cc), or throws.
  void connect_all(const HostsFile& hosts, const std::vector<int>& peers);
  std::unique_ptr<Conn> new_conn(int peer) {
    return std::make_unique<Conn>(io, peer, tls_context.get());
  }

  // I/O thread (tcp_transport.cc).
  void enqueue_send(uint32_t index);
  void enqueue_recv(uint32_t index);
  void start_write(Conn& c);
  void send_done(Conn& c);
  // What is left of the head send's frame: the rest of its header, then of its payload.
  std::pair<std::span<const std::byte>, std::span<const std::byte>> unsent(const Conn& c);
  void write_tls(Conn& c);
  void frame_done(Conn& c);
  // After a failed wait, before it throws: no write reads a caller's send buffer any more (a
  // frame begun goes on from a copy of its rest), and no read writes into a receive's (the
  // reader drops payloads once the transport has failed). With the progress thread this runs
  // there, and returns once it has. `copy` false (unwinding: the buffers may already be gone)
  // cuts the connections of frames begun instead.
  void detach_sends(bool copy);
  // Reads what the socket has, without blocking, into posted receives (tcp_reader.cc); when it
  // runs dry it leaves a readiness wait armed in the reactor, so that the next byte calls it
  // again. Returns whether it completed a receive. Called by the reactor, and on the waiting
  // thread straight from a wait (no progress thread), which then needs no reactor round trip.
  bool pump(Conn& c);
  bool fill_stage(Conn& c);
  std::size_t read_now(Conn& c, std::byte* into, std::size_t n);
  void arm(Conn& c);
  void stop_reading(Conn& c, const boost::system::error_code& ec);
  void on_header(Conn& c, const FrameHeader& h);
  void malformed(Conn& c, const std::string& why);
  bool match(Conn& c);
  // The payload of an early frame is in: a receive posted meanwhile takes it.
  bool early_done(Conn& c);
  void lost(Conn& c, const std::string& what, const boost::system::error_code& ec);
  void send_control(FrameKind kind, const std::string& payload);
  // A failure found on the I/O side (a peer's abort, a lost connection, a bad frame): poisons the
  // table and sends every peer this peer's abort at once. The owner may be computing, away from
  // the transport, and meanwhile this peer starts no data frame, so a neighbour waiting on it
  // would otherwise wait out its deadline and blame this peer instead of the cause.
  void fail_io(Code code, const std::string& message);
  // Transport::poison: fail_io on the I/O side, where the reader checks the table before each
  // copy into a receive, so that once it returns no posted buffer is written; a send under way
  // goes on from a copy of its rest.
  void abandon(Code code, const std::string& message);
  // Runs fn on the I/O side and returns once it has run: posted to the I/O thread and waited for
  // (a second at most: its handlers never block, and one that has died runs nothing any more),
  // or called right here.
  void on_io_now(const std::function<void()>& fn);
  bool control_flushed() const;
  void closed_early(Conn& c);
  // After this peer's own timeout: tells every peer why, then listens (bounded) for their
  // reasons, so that the message can name the peer that stalled and not only the neighbour that
  // waited on it. Returns `own` followed by each report received.
  std::string gather_reports(const std::string& own);
  std::mutex reports_mu;
  std::vector<std::string> reports;  // abort texts received from peers, in arrival order
  // Unwinding: the owner is being destroyed by an exception, so peers get an abort, not a bye.
  void shutdown(bool unwinding);
};

// Sets TCP_NODELAY and, when asked, the socket buffer sizes.
void tune_socket(tcp::socket& s, const TcpOptions& options);

// The TLS context of one peer (tcp_tls.cc): its certificate and key and the CA, from the hosts
// file; TLS 1.3, and each side verifies the other's certificate. Errors name the file and field.
std::unique_ptr<asio::ssl::context> make_tls_context(const HostsFile& hosts, int rank);
// "TLS: certificate verify failed (unable to get local issuer certificate)" for errors of the TLS
// layer (with the verdict on the certificate of `c`, when given); else ec's own message.
std::string tls_message(const boost::system::error_code& ec, Conn* c = nullptr);
bool is_tls_error(const boost::system::error_code& ec);

}  // namespace dpg::net
