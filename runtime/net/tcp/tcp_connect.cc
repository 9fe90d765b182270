// Connection set-up: listen, connect with retries and backoff until the deadline, and check
// each handshake (rank, world size, config hash) before any data flows. The higher rank of a
// pair connects to the lower one.
#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <sstream>

#include "runtime/core/log.h"
#include "runtime/net/tcp/tcp_impl.h"

namespace dpg::net {
namespace {

using Clock = std::chrono::steady_clock;
using boost::system::error_code;

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << std::hex << v;
  return os.str();
}

std::string address_of(const PeerAddress& p) { return p.host + ":" + std::to_string(p.port); }

// One connection being made, from either side.
struct Pending {
  explicit Pending(asio::io_context& io) : socket(io), timer(io) {}
  tcp::socket socket;
  asio::steady_timer timer;
  HeaderBytes out{}, in{};
  int peer = -1;  // known up front when connecting, after the hello when accepting
  std::chrono::milliseconds backoff{10};
  std::string last_error = "no answer";
};

struct Setup {
  TcpTransport::Impl& t;
  const HostsFile& hosts;
  std::set<int> to_connect, to_accept;  // still outstanding
  std::optional<tcp::acceptor> acceptor;
  std::vector<std::unique_ptr<Pending>> pending;
  std::map<int, std::string> last_error;
  std::optional<Error> failure;
  Clock::time_point deadline;
  bool finished = false;  // set before the leftover handlers are drained; they then do nothing

  // Cancels whatever is still in flight and runs the cancelled handlers, so that none of them
  // outlives this object.
  void finish() {
    finished = true;
    error_code ignored;
    if (acceptor) acceptor->close(ignored);
    for (auto& p : pending) {
      p->socket.close(ignored);
      p->timer.cancel();
    }
    t.io.restart();
    t.io.poll();
    t.io.restart();
  }

  void refuse(Code code, const std::string& message) {
    if (!failure) failure.emplace(code, t.prefix() + message);
    t.io.stop();
  }

  // Checks a peer's hello; true when it may join.
  bool check(const Hello& h, int expected_peer, const std::set<int>& outstanding) {
    if (h.world != t.world) {
      refuse(Code::failed_precondition,
             "peer " + std::to_string(h.rank) + " runs with " + std::to_string(h.world) +
                 " peers, this one with " + std::to_string(t.world) +
                 "; every peer must read the same hosts file");
      return false;
    }
    if (h.config_hash != t.options.config_hash) {
      refuse(Code::failed_precondition,
             "peer " + std::to_string(h.rank) + " was started with a different training "
             "configuration (config hash " + hex(h.config_hash) + ", this peer's " +
             hex(t.options.config_hash) + "); start every peer with the same settings");
      return false;
    }
    bool known = expected_peer >= 0 ? h.rank == expected_peer : outstanding.count(h.rank) > 0;
    if (!known) {
      refuse(Code::failed_precondition,
             "a connection claims to be peer " + std::to_string(h.rank) +
                 ", which this peer does not expect (duplicate rank in the launch?)");
      return false;
    }
    return true;
  }

  void adopt(Pending& p) {
    auto c = std::make_unique<Conn>(t.io, p.peer);
    c->socket = std::move(p.socket);
    tune_socket(c->socket, t.options);
    t.conns[p.peer] = std::move(c);
    to_connect.erase(p.peer);
    to_accept.erase(p.peer);
    if (to_connect.empty() && to_accept.empty()) {
      if (acceptor) acceptor->close();
      t.io.stop();
    }
  }

  void connect(Pending* p) {
    const PeerAddress& addr = hosts.peers[p->peer];
    error_code ec;
    auto endpoints = tcp::resolver(t.io).resolve(addr.host, std::to_string(addr.port), ec);
    if (ec) {
      refuse(Code::invalid_argument, "cannot resolve peer " + std::to_string(p->peer) + " at " +
                                         address_of(addr) + ": " + ec.message());
      return;
    }
    asio::async_connect(p->socket, endpoints, [this, p](error_code ec, const tcp::endpoint&) {
      if (finished) return;
      if (ec) return retry(p, ec);
      encode_hello(Hello{t.rank, t.world, t.options.config_hash}, p->out);
      asio::async_write(p->socket, asio::buffer(p->out), [this, p](error_code ec, std::size_t) {
        if (finished) return;
        if (ec) return retry(p, ec);
        asio::async_read(p->socket, asio::buffer(p->in), [this, p](error_code ec, std::size_t) {
          if (finished) return;
          if (ec) return retry(p, ec);
          std::string why;
          auto h = decode_hello(p->in, why);
          if (!h) return refuse(Code::data_loss, "peer " + std::to_string(p->peer) + " at " +
                                                     address_of(hosts.peers[p->peer]) + ": " + why);
          if (!check(*h, p->peer, to_connect)) return;
          adopt(*p);
        });
      });
    });
  }

  // A refused or reset attempt: the peer may not be listening yet. Back off and try again.
  void retry(Pending* p, const error_code& ec) {
    last_error[p->peer] = ec.message();
    error_code ignored;
    p->socket.close(ignored);
    p->timer.expires_after(p->backoff);
    p->backoff = std::min(p->backoff * 2, std::chrono::milliseconds(500));
    p->timer.async_wait([this, p](error_code ec) {
      if (!finished && !ec && Clock::now() < deadline) connect(p);
    });
  }

  void accept() {
    auto p = std::make_unique<Pending>(t.io);
    Pending* raw = p.get();
    pending.push_back(std::move(p));
    acceptor->async_accept(raw->socket, [this, raw](error_code ec) {
      if (finished || ec) return;  // closed once everyone is in
      accept();
      asio::async_read(raw->socket, asio::buffer(raw->in), [this, raw](error_code ec, std::size_t) {
        if (finished) return;
        std::string why;
        auto h = ec ? std::nullopt : decode_hello(raw->in, why);
        if (!h) {
          DPG_WARN(t.prefix() << "ignored a connection that sent no valid hello ("
                              << (ec ? ec.message() : why) << ")");
          return;
        }
        raw->peer = h->rank;
        // Answer first, so that a refused peer learns why from its own check too.
        encode_hello(Hello{t.rank, t.world, t.options.config_hash}, raw->out);
        asio::async_write(raw->socket, asio::buffer(raw->out), [this, raw, h](error_code ec,
                                                                               std::size_t) {
          if (finished) return;
          if (ec) {
            last_error[raw->peer] = ec.message();
            return;
          }
          if (check(*h, -1, to_accept)) adopt(*raw);
        });
      });
    });
  }

  std::string outstanding() const {
    std::string s;
    for (int p : to_connect) {
      auto it = last_error.find(p);
      s += "\n  peer " + std::to_string(p) + " at " + address_of(hosts.peers[p]) +
           " never answered (" + (it == last_error.end() ? "no answer" : it->second) + ")";
    }
    for (int p : to_accept) {
      s += "\n  peer " + std::to_string(p) + " (" + address_of(hosts.peers[p]) +
           ") never connected";
    }
    return s;
  }
};

}  // namespace

void tune_socket(tcp::socket& s, const TcpOptions& options) {
  error_code ec;
  s.set_option(tcp::no_delay(true), ec);
  if (options.socket_buffer_bytes > 0) {
    s.set_option(asio::socket_base::send_buffer_size(options.socket_buffer_bytes), ec);
    s.set_option(asio::socket_base::receive_buffer_size(options.socket_buffer_bytes), ec);
  }
}

void TcpTransport::Impl::connect_all(const HostsFile& hosts, const std::vector<int>& peers) {
  conns.resize(world);
  Setup s{*this, hosts, {}, {}, {}, {}, {}, {}, Clock::now() + options.connect_timeout};
  for (int p : peers) {
    if (p < 0 || p >= world || p == rank) {
      dpg::fail(Code::invalid_argument, prefix() + "cannot talk to peer " + std::to_string(p) +
                                       " (world of " + std::to_string(world) + ")");
    }
    (p < rank ? s.to_connect : s.to_accept).insert(p);
  }
  if (s.to_connect.empty() && s.to_accept.empty()) return;
  const PeerAddress& me = hosts.peers[rank];
  if (!s.to_accept.empty()) {
    error_code ec;
    auto endpoints = tcp::resolver(io).resolve(me.host, std::to_string(me.port), ec);
    if (ec || endpoints.empty()) {
      dpg::fail(Code::invalid_argument, prefix() + "cannot resolve this peer's own address " +
                                       address_of(me) + ": " + ec.message());
    }
    tcp::endpoint at = *endpoints.begin();
    s.acceptor.emplace(io);
    s.acceptor->open(at.protocol(), ec);
    if (!ec) s.acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) s.acceptor->bind(at, ec);
    if (!ec) s.acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      dpg::fail(Code::unavailable,
           prefix() + "cannot listen on " + address_of(me) + " (hosts " +
               (hosts.source.empty() ? std::string("list") : hosts.source) + ", peers[" +
               std::to_string(rank) + "]): " + ec.message());
    }
    s.accept();
  }
  for (int p : s.to_connect) {
    s.pending.push_back(std::make_unique<Pending>(io));
    s.pending.back()->peer = p;
    s.connect(s.pending.back().get());
  }
  io.run_until(s.deadline);
  s.finish();
  if (s.failure) throw *s.failure;
  if (!s.to_connect.empty() || !s.to_accept.empty()) {
    dpg::fail(Code::deadline_exceeded,
              prefix() + "connection set-up timed out after " +
                  std::to_string(options.connect_timeout.count()) + " ms:" + s.outstanding());
  }
}

}  // namespace dpg::net
