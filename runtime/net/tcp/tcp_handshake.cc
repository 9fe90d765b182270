// One connection's handshake (tcp_handshake.h). The connector speaks first:
//
//   connector: [TLS] hello, challenge ->
//   acceptor:  [TLS] <- hello, challenge (and, when both have a secret, its proof)
//   connector: checks them, then proof ->  (joined)
//   acceptor:  checks the proof            (joined)
//
// The acceptor answers before it judges the claim, so that a peer it refuses for a different
// secret (or none) learns that from its own check and stops with a clear error rather than
// retrying. On the connector's side everything but a connection that fails the way a peer that
// is not up yet fails is fatal: the hosts file says who listens there.
#include "runtime/net/tcp/tcp_handshake.h"

#include <cstring>
#include <string_view>

namespace dpg::net {

using boost::system::error_code;

Handshake::Handshake(TcpTransport::Impl& t, Role role, int peer, RankCheck check, Done done)
    : t_(t),
      role_(role),
      peer_(peer),
      check_(std::move(check)),
      done_(std::move(done)),
      conn_(t.new_conn(peer)),
      timer_(t.io),
      mode_(t.secret.empty() ? AuthMode::none : AuthMode::hmac_sha256) {
  mine_.mode = mode_;
  mine_.nonce = fresh_nonce();
  encode_hello(Hello{t.rank, t.world, t.options.config_hash}, my_hello_);
}

std::string address_text(const tcp::socket& s) {
  error_code ec;
  const auto at = s.remote_endpoint(ec);
  return ec ? std::string("an unknown address")
            : at.address().to_string() + ":" + std::to_string(at.port());
}

void Handshake::start() {
  remote_ = address_text(conn_->socket);
  timer_.expires_after(t_.options.handshake_timeout);
  timer_.async_wait([self = shared_from_this()](error_code ec) {
    if (ec || self->over()) return;
    self->finish(self->role_ == Role::connector ? Result::Kind::retry : Result::Kind::refused,
                 "no complete handshake within " +
                     std::to_string(self->t_.options.handshake_timeout.count()) + " ms");
  });
  auto go = [this] { role_ == Role::connector ? opening() : read_opening(); };
  if (!conn_->tls) return go();
  const auto side = role_ == Role::connector ? asio::ssl::stream_base::client
                                             : asio::ssl::stream_base::server;
  conn_->tls->async_handshake(side, [self = shared_from_this(), go](error_code ec) {
    if (self->over()) return;
    if (ec) return self->io_failed(ec, "the TLS handshake");
    go();
  });
}

void Handshake::close() {
  finished_ = true;
  timer_.cancel();
  error_code ignored;
  if (conn_) conn_->socket.close(ignored);
}

void Handshake::finish(Result::Kind kind, std::string reason, Code code) {
  if (finished_) return;
  finished_ = true;
  timer_.cancel();
  if (kind != Result::Kind::joined) {
    error_code ignored;
    conn_->socket.close(ignored);
  }
  done_(*this, Result{kind, code, std::move(reason), hello_});
}

void Handshake::io_failed(const error_code& ec, const char* doing) {
  if (ec == asio::error::operation_aborted) return;
  const bool eof = ec == asio::error::eof || ec == asio::ssl::error::stream_truncated;
  std::string what = eof ? std::string("closed the connection during ") + doing
                         : tls_message(ec, conn_.get()) + " during " + doing;
  const bool reset = ec == asio::error::connection_reset;
  if ((eof || reset) && role_ == Role::connector &&
      std::string_view(doing) == "the TLS handshake") {
    what += " (does that peer use --tls?)";
  }
  // A connector that holds another secret finds this peer's proof wrong, stops and closes.
  if (eof && awaiting_proof_) {
    what = "failed the challenge: it closed the connection on this peer's proof (it holds "
           "another cluster secret)";
  }
  if (role_ == Role::acceptor) return finish(Result::Kind::refused, what);
  // A TLS failure is a verdict on certificates, not a peer that is still starting.
  if (is_tls_error(ec)) return finish(Result::Kind::fatal, what, Code::failed_precondition);
  finish(Result::Kind::retry, what);
}

// Bytes that are not the handshake: the acceptor drops the connection; for the connector the
// hosts file's address answered with them, which no retry mends.
void Handshake::malformed(const std::string& reason) {
  if (role_ == Role::acceptor) return finish(Result::Kind::refused, reason);
  finish(Result::Kind::fatal, reason, Code::data_loss);
}

// ---- frames ----

void Handshake::add_frame(FrameKind kind, const std::byte* body, std::size_t n) {
  HeaderBytes h;
  encode_header(FrameHeader{kind, Tag{}, n}, h);
  std::memcpy(out_.data() + out_size_, h.data(), h.size());
  std::memcpy(out_.data() + out_size_ + h.size(), body, n);
  out_size_ += h.size() + n;
}

void Handshake::write(Next next) {
  conn_->write_all(asio::buffer(out_.data(), out_size_),
                   [self = shared_from_this(), next](error_code ec, std::size_t) {
                     if (self->over()) return;
                     if (ec) return self->io_failed(ec, "the handshake (sending)");
                     next();
                   });
}

// Reads one frame of kind `want` whose payload (its fixed size, checked by decode_header) goes
// to body[0, n).
void Handshake::read_frame(FrameKind want, std::byte* body, std::size_t n, Next next) {
  conn_->read_all(
      asio::buffer(header_in_),
      [self = shared_from_this(), want, body, n, next](error_code ec, std::size_t) {
        if (self->over()) return;
        if (ec) return self->io_failed(ec, "the handshake (receiving)");
        std::string why;
        const auto h = decode_header(self->header_in_, why);
        if (h && h->kind != want) {
          why = std::string("a ") + to_string(h->kind) + " frame where its " + to_string(want) +
                " belongs";
        }
        if (!h || h->kind != want || h->length != n) {
          return self->malformed(std::string("sent a malformed ") + to_string(want) + ": " + why);
        }
        self->conn_->read_all(asio::buffer(body, n), [self, next](error_code ec, std::size_t) {
          if (self->over()) return;
          if (ec) return self->io_failed(ec, "the handshake (receiving)");
          next();
        });
      });
}

bool Handshake::take_hello(int expect_rank) {
  std::string why;
  const auto h = decode_hello(their_hello_, why);
  if (!h) {
    malformed("sent a malformed hello: " + why);
    return false;
  }
  hello_ = *h;
  if (role_ == Role::acceptor) {
    peer_ = h->rank;
    return true;
  }
  if (h->rank != expect_rank) {
    finish(Result::Kind::fatal,
           "answered as rank " + std::to_string(h->rank) + ", but the hosts file puts rank " +
               std::to_string(expect_rank) + " there",
           Code::failed_precondition);
    return false;
  }
  return true;
}

bool Handshake::take_challenge() {
  std::string why;
  const auto c = decode_challenge(challenge_in_, why);
  if (!c) {
    malformed("sent a malformed challenge: " + why);
    return false;
  }
  theirs_ = *c;
  return true;
}

Transcript Handshake::transcript() const {
  const bool connector = role_ == Role::connector;
  return Transcript{connector ? my_hello_ : their_hello_, connector ? their_hello_ : my_hello_,
                    connector ? mine_.nonce : theirs_.nonce, connector ? theirs_.nonce : mine_.nonce};
}

// ---- the connector ----

void Handshake::opening() {
  ChallengeBytes c;
  encode_challenge(mine_, c);
  out_size_ = 0;
  add_frame(FrameKind::hello, my_hello_.data(), my_hello_.size());
  add_frame(FrameKind::challenge, c.data(), c.size());
  write([this] { read_answer(); });
}

void Handshake::read_answer() {
  read_frame(FrameKind::hello, their_hello_.data(), their_hello_.size(), [this] {
    if (!take_hello(peer_)) return;
    read_frame(FrameKind::challenge, challenge_in_.data(), challenge_in_.size(), [this] {
      if (!take_challenge()) return;
      if (theirs_.mode != mode_) {
        return finish(Result::Kind::fatal,
                      theirs_.mode == AuthMode::none
                          ? "it has no cluster secret and this peer has one (" + t_.secret_origin +
                                "); give every peer the same secret"
                          : std::string("it requires a cluster secret and this peer has none "
                                        "(hosts file secret or secret_file, or ") +
                                kSecretVariable + ")",
                      Code::failed_precondition);
      }
      if (mode_ == AuthMode::none) return finish(Result::Kind::joined, "");
      read_frame(FrameKind::proof, proof_in_.data(), proof_in_.size(), [this] {
        if (!proof_valid(t_.secret, Role::acceptor, transcript(), proof_in_)) {
          return finish(Result::Kind::fatal,
                        "failed the challenge: its cluster secret is not this peer's (" +
                            t_.secret_origin + ")",
                        Code::failed_precondition);
        }
        const Proof mine = make_proof(t_.secret, Role::connector, transcript());
        out_size_ = 0;
        add_frame(FrameKind::proof, mine.data(), mine.size());
        write([this] { finish(Result::Kind::joined, ""); });
      });
    });
  });
}

// ---- the acceptor ----

void Handshake::read_opening() {
  read_frame(FrameKind::hello, their_hello_.data(), their_hello_.size(), [this] {
    if (!take_hello(-1)) return;
    read_frame(FrameKind::challenge, challenge_in_.data(), challenge_in_.size(), [this] {
      if (take_challenge()) answer();
    });
  });
}

void Handshake::answer() {
  ChallengeBytes c;
  encode_challenge(mine_, c);
  out_size_ = 0;
  add_frame(FrameKind::hello, my_hello_.data(), my_hello_.size());
  add_frame(FrameKind::challenge, c.data(), c.size());
  const bool prove = mode_ == AuthMode::hmac_sha256 && theirs_.mode == mode_;
  if (prove) {
    const Proof mine = make_proof(t_.secret, Role::acceptor, transcript());
    add_frame(FrameKind::proof, mine.data(), mine.size());
  }
  write([this] {
    if (theirs_.mode != mode_) {
      return finish(Result::Kind::refused, theirs_.mode == AuthMode::none
                                               ? "it has no cluster secret, and this peer "
                                                 "requires one"
                                               : "it has a cluster secret, and this peer has none");
    }
    if (const std::string why = check_(hello_.rank); !why.empty()) {
      return finish(Result::Kind::refused, why);
    }
    if (mode_ == AuthMode::none) return finish(Result::Kind::joined, "");
    awaiting_proof_ = true;
    read_frame(FrameKind::proof, proof_in_.data(), proof_in_.size(), [this] {
      awaiting_proof_ = false;
      if (!proof_valid(t_.secret, Role::connector, transcript(), proof_in_)) {
        return finish(Result::Kind::refused,
                      "failed the challenge: it does not know the cluster secret");
      }
      finish(Result::Kind::joined, "");
    });
  });
}

}  // namespace dpg::net
