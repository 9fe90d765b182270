// Who may join, over real sockets: a transport with a cluster secret refuses clients that do not
// know it, claim a rank they may not, send malformed frames or say nothing, and goes on accepting,
// so the genuine peer still joins; peers whose secrets differ stop with errors that say so.
#include <doctest/doctest.h>

#include <poll.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "runtime/net/auth.h"
#include "runtime/net/frame.h"
#include "tests/unit/tcp/tcp_test_util.h"

using dpg::public_value;  // the tests' buffers are synthetic

using namespace std::chrono_literals;
using namespace dpg::net;
using dpg::test::run_tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kHash = 0xfeed;
const std::string kSecret = "unit-test-cluster-secret-0123";

std::vector<std::byte> frame(FrameKind kind, const std::byte* body, std::size_t n,
                             uint64_t length) {
  std::vector<std::byte> out(kHeaderBytes + n);
  HeaderBytes h;
  encode_header(FrameHeader{kind, Tag{}, length}, h);
  std::memcpy(out.data(), h.data(), kHeaderBytes);
  if (n > 0) std::memcpy(out.data() + kHeaderBytes, body, n);
  return out;
}

// A hand-written client: connects and sends what the test says.
class RawClient {
 public:
  explicit RawClient(int port, uint32_t from = 0) : fd_(dpg::test::connect_loopback(port, from)) {
    REQUIRE(fd_ >= 0);
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  void send(const std::vector<std::byte>& b) {
    REQUIRE(::send(fd_, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size()));
  }
  // Reads what comes until `want` bytes are in (true) or the other end closes or `limit` passes.
  bool read(std::size_t want, std::chrono::milliseconds limit) {
    const auto until = Clock::now() + limit;
    while (got.size() < want) {
      if (!wait_readable(until)) return false;
      std::byte buf[4096];
      const ssize_t n = ::recv(fd_, buf, std::min(sizeof buf, want - got.size()), 0);
      if (n <= 0) return false;
      got.insert(got.end(), buf, buf + n);
    }
    return true;
  }
  // True when the other end closes (end of stream or reset) within `limit`.
  bool closed_within(std::chrono::milliseconds limit) {
    const auto until = Clock::now() + limit;
    for (;;) {
      if (!wait_readable(until)) return false;
      std::byte buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
    }
  }
  std::vector<std::byte> got;

 private:
  bool wait_readable(Clock::time_point until) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(left.count())) > 0;
  }
  int fd_ = -1;
};

// Hello and challenge, as a connector sends them.
std::vector<std::byte> opening(const HelloBytes& hello, const Challenge& c) {
  ChallengeBytes cb;
  encode_challenge(c, cb);
  auto out = frame(FrameKind::hello, hello.data(), hello.size(), hello.size());
  const auto second = frame(FrameKind::challenge, cb.data(), cb.size(), cb.size());
  out.insert(out.end(), second.begin(), second.end());
  return out;
}

// Rank 0 waits long for its peer (30 s) but drops a silent client after 300 ms.
TcpOptions patient_options() {
  TcpOptions o;
  o.connect_timeout = 30s;
  o.handshake_timeout = 300ms;
  o.timeout = 10s;
  o.config_hash = kHash;
  return o;
}

constexpr std::size_t kAnswerBytes =
    3 * kHeaderBytes + kHelloBytes + kChallengeBytes + kProofBytes;  // hello, challenge, proof

}  // namespace

TEST_CASE("auth: bad clients are refused one by one and the genuine peer still joins") {
  HostsFile hosts = local_hosts(2);
  hosts.secret = kSecret;
  hosts.secret_origin = "the test";
  const TcpOptions o = patient_options();
  dpg::test::RankZeroWaits zero(hosts, o);
  const int port = hosts.peers[0].port;

  {
    INFO("a client with the wrong secret: answered with rank 0's proof, then refused");
    RawClient c(port);
    Transcript t;
    encode_hello(Hello{1, 2, kHash}, t.connector_hello);
    const Challenge mine{AuthMode::hmac_sha256, fresh_nonce()};
    t.connector_nonce = mine.nonce;
    c.send(opening(t.connector_hello, mine));
    REQUIRE(c.read(kAnswerBytes, 5s));
    std::memcpy(t.acceptor_hello.data(), c.got.data() + kHeaderBytes, kHelloBytes);
    ChallengeBytes theirs;
    std::memcpy(theirs.data(), c.got.data() + 2 * kHeaderBytes + kHelloBytes, kChallengeBytes);
    std::string why;
    const auto ch = decode_challenge(theirs, why);
    REQUIRE(ch);
    CHECK(ch->mode == AuthMode::hmac_sha256);
    t.acceptor_nonce = ch->nonce;
    Proof acceptor_proof;
    std::memcpy(acceptor_proof.data(), c.got.data() + kAnswerBytes - kProofBytes, kProofBytes);
    CHECK(proof_valid(kSecret, Role::acceptor, t, acceptor_proof));  // rank 0 proved itself
    const Proof wrong = make_proof("not-the-cluster-secret-99", Role::connector, t);
    c.send(frame(FrameKind::proof, wrong.data(), wrong.size(), wrong.size()));
    CHECK(c.closed_within(5s));
  }
  {
    INFO("a client claiming ranks it may not (rank 0's own, and one outside the world)");
    for (int claim : {0, 9}) {
      RawClient c(port);
      HelloBytes h;
      encode_hello(Hello{claim, 2, kHash}, h);
      c.send(opening(h, Challenge{AuthMode::hmac_sha256, fresh_nonce()}));
      CHECK(c.closed_within(5s));
    }
  }
  {
    INFO("a client whose hello frame says 2^40 bytes: refused before any is read");
    RawClient c(port);
    HelloBytes h;
    encode_hello(Hello{1, 2, kHash}, h);
    c.send(frame(FrameKind::hello, h.data(), h.size(), uint64_t{1} << 40));
    CHECK(c.closed_within(5s));
  }
  {
    INFO("a client without the secret: answered without a proof, then refused");
    RawClient c(port);
    HelloBytes h;
    encode_hello(Hello{1, 2, kHash}, h);
    c.send(opening(h, Challenge{AuthMode::none, fresh_nonce()}));
    CHECK(c.closed_within(5s));
  }
  {
    INFO("a client that says nothing: dropped at the handshake deadline");
    const auto t0 = Clock::now();
    RawClient c(port);
    CHECK(c.closed_within(5s));
    CHECK(Clock::now() - t0 >= 250ms);
  }
  {
    INFO("a replayed proof: the first client's proof is useless on a second connection");
    RawClient first(port);
    Transcript t;
    encode_hello(Hello{1, 2, kHash}, t.connector_hello);
    const Challenge mine{AuthMode::hmac_sha256, fresh_nonce()};
    first.send(opening(t.connector_hello, mine));
    REQUIRE(first.read(kAnswerBytes, 5s));
    // A proof made with the secret for the first connection's nonces ...
    std::memcpy(t.acceptor_hello.data(), first.got.data() + kHeaderBytes, kHelloBytes);
    t.connector_nonce = mine.nonce;
    std::memcpy(t.acceptor_nonce.data(), first.got.data() + 2 * kHeaderBytes + kHelloBytes + 8,
                kNonceBytes);
    const Proof recorded = make_proof(kSecret, Role::connector, t);
    // ... sent on a second connection, which has a fresh nonce from rank 0.
    RawClient second(port);
    second.send(opening(t.connector_hello, mine));
    REQUIRE(second.read(kAnswerBytes, 5s));
    second.send(frame(FrameKind::proof, recorded.data(), recorded.size(), recorded.size()));
    CHECK(second.closed_within(5s));
  }

  // The genuine rank 1 joins after all of them.
  const auto [error0, error1] = zero.genuine_join();
  CHECK_MESSAGE(error0.empty(), error0);
  CHECK_MESSAGE(error1.empty(), error1);
}

TEST_CASE("auth: without a secret, a stranger's mismatched hello is dropped; the peer joins") {
  HostsFile hosts = local_hosts(2);  // every peer on 127.0.0.1, no cluster secret
  const TcpOptions o = patient_options();
  dpg::test::RankZeroWaits zero(hosts, o);
  {
    INFO("from 127.0.0.2, claiming rank 1 with another configuration and another world");
    for (const Hello& claim : {Hello{1, 2, kHash + 1}, Hello{1, 3, kHash}}) {
      RawClient c(hosts.peers[0].port, 0x7f000002);
      HelloBytes h;
      encode_hello(claim, h);
      c.send(opening(h, Challenge{AuthMode::none, fresh_nonce()}));
      CHECK(c.closed_within(5s));
    }
  }
  // Rank 0 logged and dropped them; the genuine rank 1 still joins.
  const auto [error0, error1] = zero.genuine_join();
  CHECK_MESSAGE(error0.empty(), error0);
  CHECK_MESSAGE(error1.empty(), error1);
}

TEST_CASE("auth: four peers with one secret all-reduce, in both progress modes") {
  for (bool thread : {false, true}) {
    CAPTURE(thread);
    TcpOptions o;
    o.timeout = 20s;
    o.progress_thread = thread;
    auto errors = run_tcp(4, o, [](TcpTransport& t) {
      dpg::collective::Communicator c(t);
      std::vector<float> v(100003, float(t.rank()));
      c.allreduce(public_value(v));
      for (float x : v) {
        if (x != 6.0f) throw dpg::Error(dpg::Code::internal, "wrong sum");
      }
    }, [](int, TcpOptions&, HostsFile& h) { h.secret = kSecret; });
    for (auto& e : errors) CHECK_MESSAGE(e == "", e);
  }
}

TEST_CASE("auth: peers whose secrets differ stop, each saying why") {
  TcpOptions o;
  o.connect_timeout = 1500ms;
  auto with = [&](const std::string& zero, const std::string& one) {
    return run_tcp(2, o, [](TcpTransport&) {}, [&](int r, TcpOptions&, HostsFile& h) {
      h.secret = r == 0 ? zero : one;
      h.secret_origin = "rank " + std::to_string(r) + "'s file";
    });
  };
  auto errors = with(kSecret, "another-cluster-secret-42");
  CAPTURE(errors[0]);
  CAPTURE(errors[1]);
  CHECK(errors[1].find("rank 1: peer 0 at 127.0.0.1:") != std::string::npos);
  CHECK(errors[1].find("failed the challenge: its cluster secret is not this peer's "
                       "(rank 1's file)") != std::string::npos);
  CHECK(errors[0].find("peer 1 (127.0.0.1:") != std::string::npos);
  CHECK(errors[0].find("never connected (last: refused a connection from 127.0.0.1:") !=
        std::string::npos);
  // Rank 0 hears it too, as docs/SECURITY.md shows: rank 1 closed on rank 0's proof.
  CHECK(errors[0].find("(claiming rank 1): failed the challenge: it closed the connection on "
                       "this peer's proof") != std::string::npos);
  for (const auto& e : errors) CHECK(e.find(kSecret) == std::string::npos);  // never shown

  errors = with(kSecret, "");
  CHECK(errors[1].find("it requires a cluster secret and this peer has none") != std::string::npos);
  errors = with("", kSecret);
  CHECK(errors[1].find("it has no cluster secret and this peer has one (rank 1's file)") !=
        std::string::npos);
}
