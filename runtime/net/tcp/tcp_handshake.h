// Private to runtime/net/tcp: one connection's handshake, from either end, before any data flows.
// TLS first when it is on; then each side sends a hello and a challenge, and with a cluster
// secret each proves it knows the secret (runtime/net/auth.h). The handshake has a deadline of
// its own, so a peer that connects and says nothing is dropped, not waited for.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "runtime/net/auth.h"
#include "runtime/net/tcp/tcp_impl.h"

namespace dpg::net {

// "127.0.0.1:45678": the other end of a connected socket, for messages.
std::string address_text(const tcp::socket& s);

class Handshake : public std::enable_shared_from_this<Handshake> {
 public:
  struct Result {
    // joined: the peer proved itself (or no secret is in use) and `hello` is its hello.
    // retry: the connection failed the way a peer that is not up yet fails (connector only).
    // refused: the other end may not join; `reason` says why. fatal: the peers disagree in a way
    // no retry mends (different secrets, TLS refused), `code` and `reason` say how.
    enum class Kind { joined, retry, refused, fatal } kind = Kind::joined;
    Code code = Code::unavailable;
    std::string reason;
    Hello hello;
  };
  using Done = std::function<void(Handshake&, const Result&)>;
  // The acceptor's check of a claimed rank before it answers: "" when it may go on, else why not.
  using RankCheck = std::function<std::string(int rank)>;

  // `peer`: the rank the connector dialled (the acceptor learns it from the hello).
  Handshake(TcpTransport::Impl& t, Role role, int peer, RankCheck check, Done done);

  Conn& conn() { return *conn_; }
  std::unique_ptr<Conn> take_conn() { return std::move(conn_); }
  Role role() const { return role_; }
  int peer() const { return peer_; }
  const std::string& remote() const { return remote_; }  // "127.0.0.1:45678" once connected

  // The socket is connected (connector) or accepted (acceptor): runs the handshake; `done` is
  // called once, unless close() comes first.
  void start();
  // Cancels it and closes the socket; `done` is not called.
  void close();

 private:
  using Next = std::function<void()>;
  void opening();           // connector: hello and challenge, then the answer
  void read_opening();      // acceptor: the connector's hello and challenge
  void answer();            // acceptor: hello, challenge, proof
  void read_answer();       // connector: the acceptor's hello, challenge, proof
  void read_frame(FrameKind want, std::byte* body, std::size_t n, Next next);
  void write(Next next);    // writes out_[0, out_size_)
  void add_frame(FrameKind kind, const std::byte* body, std::size_t n);
  bool take_hello(int expect_rank);       // decodes and checks theirs; false when finished
  bool take_challenge();
  Transcript transcript() const;
  void io_failed(const boost::system::error_code& ec, const char* doing);
  void malformed(const std::string& reason);
  void finish(Result::Kind kind, std::string reason, Code code = Code::unavailable);
  bool over() const { return finished_; }

  TcpTransport::Impl& t_;
  Role role_;
  int peer_;
  RankCheck check_;
  Done done_;
  std::unique_ptr<Conn> conn_;
  asio::steady_timer timer_;
  std::string remote_;
  bool finished_ = false;
  AuthMode mode_;
  bool awaiting_proof_ = false;  // acceptor: its proof sent, the connector's not yet in
  HelloBytes my_hello_{}, their_hello_{};
  Challenge mine_, theirs_;
  ChallengeBytes challenge_in_{};
  Proof proof_in_{};
  Hello hello_;  // theirs, decoded
  HeaderBytes header_in_{};
  std::array<std::byte, 3 * (kHeaderBytes + kChallengeBytes)> out_{};
  std::size_t out_size_ = 0;
};

}  // namespace dpg::net
