// Connection set-up: listen, connect with retries and backoff until the deadline, and run each
// connection's handshake (tcp_handshake.cc) before any data flows. The higher rank of a pair
// connects to the lower one. A connection that fails its handshake on the accepting side (no
// secret, a wrong one, a rank it may not claim, malformed or no frames) is closed and logged with
// its address and the reason, and the listener goes on accepting, so that the genuine peer can
// still join; only peers that proved themselves and then disagree on the run (world size, config
// hash) stop the set-up.
#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <sstream>

#include "runtime/core/log.h"
#include "runtime/net/tcp/tcp_handshake.h"

namespace dpg::net {
namespace {

using Clock = std::chrono::steady_clock;
using boost::system::error_code;
using Kind = Handshake::Result::Kind;

// Bounds on what connections that never join can cost: handshakes in progress at once (each
// holds a socket and a few hundred bytes), and refusals logged one by one before they are only
// counted.
constexpr std::size_t kMaxHandshakes = 64;
constexpr int kMaxRefusalLines = 32;

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << std::hex << v;
  return os.str();
}

std::string address_of(const PeerAddress& p) { return p.host + ":" + std::to_string(p.port); }

struct Setup {
  Setup(TcpTransport::Impl& impl, const HostsFile& h) : t(impl), hosts(h) {}
  TcpTransport::Impl& t;
  const HostsFile& hosts;
  std::set<int> to_connect, to_accept;  // still outstanding
  std::optional<tcp::acceptor> acceptor;
  std::set<std::shared_ptr<Handshake>> live;  // handshakes in progress
  std::size_t accepting = 0;                  // of them, on the accepting side
  std::map<int, std::unique_ptr<asio::steady_timer>> backoff_timer;
  std::map<int, std::chrono::milliseconds> backoff;
  std::map<int, std::string> last_error;  // why a peer has not joined yet
  std::string last_refusal;               // of any connection, claiming a rank or not
  int refusals = 0;
  std::optional<Error> failure;
  Clock::time_point deadline;
  // Set before the leftover handlers are drained; they then do nothing. Shared, so that a handler
  // can tell without touching this object.
  std::shared_ptr<bool> over = std::make_shared<bool>(false);

  // Cancels whatever is still in flight and runs the cancelled handlers, so that none of them
  // outlives this object.
  void finish() {
    *over = true;
    error_code ignored;
    if (acceptor) acceptor->close(ignored);
    for (auto& h : live) h->close();
    for (auto& [peer, timer] : backoff_timer) timer->cancel();
    t.io.restart();
    t.io.poll();
    t.io.restart();
    live.clear();
    if (refusals > kMaxRefusalLines) {
      DPG_WARN("refused " << refusals << " connections in all during set-up ("
                          << refusals - kMaxRefusalLines << " not logged one by one)");
    }
  }

  // A failure that ends the set-up.
  void stop(Code code, const std::string& message) {
    if (!failure) failure.emplace(code, t.prefix() + message);
    t.io.stop();
  }

  void refused(const std::string& remote, int claimed, const std::string& why) {
    ++refusals;
    const std::string who = claimed >= 0 ? " (claiming rank " + std::to_string(claimed) + ")" : "";
    last_refusal = "refused a connection from " + remote + who + ": " + why;
    if (claimed >= 0 && to_accept.count(claimed)) last_error[claimed] = last_refusal;
    if (refusals <= kMaxRefusalLines) {
      DPG_WARN("refused a connection from " << remote << who << ": " << why);
    }
    if (refusals == kMaxRefusalLines) {
      DPG_WARN("further refused connections are counted, not logged");
    }
  }

  // The run's settings, checked once a peer has proved itself (or no secret is in use): why
  // they differ from this peer's, or "".
  std::string disagreement(const Hello& h) const {
    if (h.world != t.world) {
      return "peer " + std::to_string(h.rank) + " runs with " + std::to_string(h.world) +
             " peers, this one with " + std::to_string(t.world) +
             "; every peer must read the same hosts file";
    }
    if (h.config_hash != t.options.config_hash) {
      return "peer " + std::to_string(h.rank) + " was started with a different training "
             "configuration (config hash " + hex(h.config_hash) + ", this peer's " +
             hex(t.options.config_hash) + "); start every peer with the same settings";
    }
    return "";
  }
  bool agrees(const Hello& h) {
    const std::string why = disagreement(h);
    if (!why.empty()) stop(Code::failed_precondition, why);
    return why.empty();
  }

  // Whether an accepted connection comes from the address of the rank it claims, as the hosts
  // file names it (its host resolved). Without a secret this is all that tells a misconfigured
  // peer, whose mismatch ends the set-up, from a stranger, who is dropped.
  bool from_host_of(Handshake& h, int rank) {
    if (rank < 0 || rank >= t.world) return false;
    error_code ec;
    const auto from = h.conn().socket.remote_endpoint(ec);
    if (ec) return false;
    const auto& host = hosts.peers[static_cast<std::size_t>(rank)].host;
    const auto resolved = tcp::resolver(t.io).resolve(host, "", ec);
    if (ec) return false;
    for (const auto& e : resolved) {
      if (e.endpoint().address() == from.address()) return true;
    }
    return false;
  }

  // Why a connection may not claim `rank` here ("" when it may).
  std::string claim_check(int rank) const {
    const std::string r = "rank " + std::to_string(rank);
    if (rank < 0 || rank >= t.world) return r + " is outside the " + std::to_string(t.world) + " peers";
    if (rank == t.rank) return r + " is this peer's own";
    if (rank < t.rank) return r + " is lower: this peer connects to it, it does not accept it";
    if (to_accept.count(rank)) return "";
    if (t.conns[rank]) return r + " has already joined";
    return "this peer does not talk to " + r;
  }

  void adopt(std::unique_ptr<Conn> c, int peer) {
    c->peer = peer;
    c->stage = std::make_unique<std::byte[]>(Conn::kStageBytes);
    c->early = EarlyQueue(t.options.early);
    if (c->tls) c->tls_in = std::make_unique<std::byte[]>(Conn::kTlsInBytes);
    tune_socket(c->socket, t.options);
    t.conns[peer] = std::move(c);
    to_connect.erase(peer);
    to_accept.erase(peer);
    last_error.erase(peer);
    if (to_connect.empty() && to_accept.empty()) t.io.stop();
  }

  void done(Handshake& h, const Handshake::Result& r) {
    auto self = h.shared_from_this();
    live.erase(self);
    if (h.role() == Role::acceptor) {
      --accepting;
      if (r.kind != Kind::joined) return refused(h.remote(), h.peer(), r.reason);
      if (const std::string why = disagreement(r.hello); !why.empty()) {
        if (t.secret.empty() && !from_host_of(h, h.peer())) {
          h.close();
          return refused(h.remote(), h.peer(), why + " (not from that peer's host in the hosts "
                                                     "file: dropped)");
        }
        return stop(Code::failed_precondition, why);
      }
      // Two connections may claim one rank at once; the first to prove itself joins.
      if (const std::string why = claim_check(h.peer()); !why.empty()) {
        h.close();
        return refused(h.remote(), h.peer(), why);
      }
      return adopt(h.take_conn(), h.peer());
    }
    const int p = h.peer();
    const std::string at = "peer " + std::to_string(p) + " at " + address_of(hosts.peers[p]);
    switch (r.kind) {
      case Kind::joined:
        if (agrees(r.hello)) adopt(h.take_conn(), p);
        return;
      case Kind::retry:
        return retry(p, r.reason);
      case Kind::refused:
      case Kind::fatal:
        return stop(r.code, at + ": " + r.reason);
    }
  }

  void connect(int p) {
    const PeerAddress& addr = hosts.peers[p];
    error_code ec;
    auto endpoints = tcp::resolver(t.io).resolve(addr.host, std::to_string(addr.port), ec);
    if (ec) {
      return stop(Code::invalid_argument, "cannot resolve peer " + std::to_string(p) + " at " +
                                              address_of(addr) + ": " + ec.message());
    }
    auto h = std::make_shared<Handshake>(t, Role::connector, p, nullptr,
                                         [this](Handshake& h, const Handshake::Result& r) {
                                           done(h, r);
                                         });
    live.insert(h);
    asio::async_connect(h->conn().socket, endpoints,
                        [this, h, p, over = over](error_code ec, const tcp::endpoint&) {
                          if (*over) return;
                          if (!ec) return h->start();
                          live.erase(h);
                          retry(p, ec.message());
                        });
  }

  // A refused or reset attempt: the peer may not be listening yet. Back off and try again.
  void retry(int p, const std::string& why) {
    last_error[p] = why;
    auto& timer = backoff_timer[p];
    if (!timer) timer = std::make_unique<asio::steady_timer>(t.io);
    auto& wait = backoff.try_emplace(p, std::chrono::milliseconds(10)).first->second;
    timer->expires_after(wait);
    wait = std::min(wait * 2, std::chrono::milliseconds(500));
    timer->async_wait([this, p, over = over](error_code ec) {
      if (!*over && !ec && Clock::now() < deadline) connect(p);
    });
  }

  void accept() {
    auto h = std::make_shared<Handshake>(t, Role::acceptor, -1,
                                         [this](int rank) { return claim_check(rank); },
                                         [this](Handshake& h, const Handshake::Result& r) {
                                           done(h, r);
                                         });
    acceptor->async_accept(h->conn().socket, [this, h, over = over](error_code ec) {
      if (*over || ec) return;  // closed once everyone is in
      accept();
      if (accepting >= kMaxHandshakes) {
        const std::string remote = address_text(h->conn().socket);
        h->close();
        return refused(remote, -1, std::to_string(kMaxHandshakes) +
                                       " handshakes are already in progress");
      }
      ++accepting;
      live.insert(h);
      h->start();
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
      auto it = last_error.find(p);
      s += "\n  peer " + std::to_string(p) + " (" + address_of(hosts.peers[p]) +
           ") never connected" + (it == last_error.end() ? "" : " (last: " + it->second + ")");
    }
    // A refusal before the claim was known (TLS, a malformed hello) may have been the peer.
    if (!to_accept.empty() && !last_refusal.empty()) s += "\n  last: " + last_refusal;
    return s;
  }
};

// One line saying how peers are admitted; with neither a secret nor TLS, a warning.
void say_how_peers_join(const TcpTransport::Impl& t) {
  const bool tls = t.tls_context != nullptr;
  if (t.secret.empty() && !tls) {
    DPG_WARN("no cluster secret (hosts file secret or secret_file, or "
                        << kSecretVariable << "): any process that can reach this peer's port "
                        << "may join the run as a peer (docs/SECURITY.md)");
    return;
  }
  std::string how = tls ? "present a certificate the hosts file's CA signed (TLS 1.3)" : "";
  if (!t.secret.empty()) {
    how += std::string(tls ? " and " : "") + "prove the cluster secret from " + t.secret_origin +
           " (HMAC-SHA256)";
  }
  DPG_INFO("peers must " << how);
}

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
  Setup s{*this, hosts};
  s.deadline = Clock::now() + options.connect_timeout;
  for (int p : peers) {
    if (p < 0 || p >= world || p == rank) {
      dpg::fail(Code::invalid_argument, prefix() + "cannot talk to peer " + std::to_string(p) +
                                       " (world of " + std::to_string(world) + ")");
    }
    (p < rank ? s.to_connect : s.to_accept).insert(p);
  }
  if (s.to_connect.empty() && s.to_accept.empty()) return;
  say_how_peers_join(*this);
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
           prefix() + "cannot listen on " + address_of(me) + " (" + hosts.name() +
               ", peers[" + std::to_string(rank) + "]): " + ec.message());
    }
    s.accept();
  }
  for (int p : std::set<int>(s.to_connect)) s.connect(p);
  // In slices, so that a signal (options.stop) ends the set-up within one.
  bool stopped = false;
  while (!io.stopped() && Clock::now() < s.deadline) {
    io.run_until(std::min(s.deadline, Clock::now() + std::chrono::milliseconds(100)));
    if (options.stop != nullptr && options.stop->load(std::memory_order_relaxed)) {
      stopped = true;
      break;
    }
  }
  s.finish();
  if (stopped && !s.failure) check_stop(options.stop, prefix());
  if (s.failure) throw *s.failure;
  if (!s.to_connect.empty() || !s.to_accept.empty()) {
    dpg::fail(Code::deadline_exceeded,
              prefix() + "connection set-up timed out after " +
                  std::to_string(options.connect_timeout.count()) + " ms:" + s.outstanding());
  }
}

}  // namespace dpg::net
