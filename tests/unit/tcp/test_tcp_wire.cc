// The TCP transport's reader against a hand-driven peer: rank 1 is a plain socket in this test
// that speaks the wire format byte by byte, so that frames can arrive split anywhere, run
// together, ahead of their receives, malformed, too long, or cut off.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/net/auth.h"
#include "runtime/net/frame.h"
#include "runtime/net/hosts.h"
#include "runtime/net/tcp/tcp_transport.h"
#include "tests/unit/tcp/tcp_test_util.h"

using namespace std::chrono_literals;
using dpg::net::FrameHeader;
using dpg::net::FrameKind;
using dpg::net::HeaderBytes;
using dpg::net::Tag;
using dpg::net::TcpOptions;
using dpg::net::TcpTransport;

namespace {

constexpr uint64_t kHash = 0x5eed;

// Rank 1 of two, by hand: connects to rank 0, trades hellos, then lets the test write bytes.
class FakePeer {
 public:
  explicit FakePeer(int port) {
    fd_ = dpg::test::connect_loopback(port);
    REQUIRE(fd_ >= 0);
    // The handshake without a secret: hello and challenge each way.
    dpg::net::HelloBytes hello;
    dpg::net::encode_hello(dpg::net::Hello{1, 2, kHash}, hello);
    dpg::net::ChallengeBytes challenge;
    dpg::net::encode_challenge(dpg::net::Challenge{dpg::net::AuthMode::none, {}}, challenge);
    auto opening = frame(FrameKind::hello, Tag{}, std::vector<std::byte>(hello.begin(), hello.end()),
                         hello.size());
    const auto second = frame(FrameKind::challenge, Tag{},
                              std::vector<std::byte>(challenge.begin(), challenge.end()),
                              challenge.size());
    opening.insert(opening.end(), second.begin(), second.end());
    write(opening.data(), opening.size());
    std::vector<std::byte> answer(2 * dpg::net::kHeaderBytes + hello.size() + challenge.size());
    std::size_t got = 0;
    while (got < answer.size()) {
      const ssize_t n = ::recv(fd_, answer.data() + got, answer.size() - got, 0);
      REQUIRE(n > 0);
      got += static_cast<std::size_t>(n);
    }
  }
  ~FakePeer() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void write(const void* data, std::size_t n) {
    const auto* p = static_cast<const std::byte*>(data);
    while (n > 0) {
      const ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
      REQUIRE(w > 0);
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  // The frame's bytes: header, then payload.
  static std::vector<std::byte> frame(FrameKind kind, Tag tag, const std::vector<std::byte>& payload,
                                      uint64_t length) {
    HeaderBytes h;
    dpg::net::encode_header(FrameHeader{kind, tag, length}, h);
    std::vector<std::byte> out(h.begin(), h.end());
    out.insert(out.end(), payload.begin(), payload.end());
    return out;
  }
  static std::vector<std::byte> data(Tag tag, const std::vector<std::byte>& payload) {
    return frame(FrameKind::data, tag, payload, payload.size());
  }

 private:
  int fd_ = -1;
};

std::vector<std::byte> pattern(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte((i * 131 + seed * 7) & 0xff);
  return v;
}

// Rank 0 is a real transport; `peer` drives rank 1 on its own thread.
void with_fake_peer(bool progress_thread, const std::function<void(TcpTransport&)>& rank0,
                    const std::function<void(FakePeer&)>& peer) {
  const auto hosts = dpg::net::local_hosts(2);
  TcpOptions o;
  o.progress_thread = progress_thread;
  o.timeout = 5s;
  o.connect_timeout = 10s;
  o.config_hash = kHash;
  std::thread fake([&] {
    FakePeer p(hosts.peers[0].port);
    peer(p);
    std::this_thread::sleep_for(300ms);  // let rank 0 read everything before the close
  });
  struct Join {
    std::thread& t;
    ~Join() { t.join(); }
  } join{fake};
  TcpTransport t(hosts, 0, {1}, o);
  rank0(t);
}

const Tag kTagA{7, 1, 0}, kTagB{7, 1, 1}, kTagC{7, 1, 2};  // op 7: any

}  // namespace

TEST_CASE("wire: frames split anywhere, run together and ahead of their receives arrive whole") {
  for (bool thread : {false, true}) {
    CAPTURE(thread);
    // c is larger than the reader's stage; d arrives before its receive is posted.
    const auto a = pattern(4000, 1), b = pattern(10, 2), c = pattern(300000, 3),
               d = pattern(2000, 4);
    std::vector<std::byte> got_a(a.size()), got_b(b.size()), got_c(c.size()), got_d(d.size());
    const Tag tag_d{7, 1, 3};
    with_fake_peer(
        thread,
        [&](TcpTransport& t) {
          auto ha = t.recv(1, kTagA, got_a);
          auto hb = t.recv(1, kTagB, got_b);
          t.wait(ha);  // while A trickles in
          t.wait(hb);
          std::this_thread::sleep_for(100ms);  // D and C are on their way meanwhile
          auto hd = t.recv(1, tag_d, got_d);
          t.wait(hd);
          auto hc = t.recv(1, kTagC, got_c);
          t.wait(hc);
        },
        [&](FakePeer& p) {
          const auto fa = FakePeer::data(kTagA, a);
          // A: the header in three pieces, then the payload in uneven ones, with pauses.
          std::size_t at = 0;
          for (std::size_t n : {5, 20, 7, 1, 999, 3000}) {
            p.write(fa.data() + at, n);
            at += n;
            std::this_thread::sleep_for(5ms);
          }
          p.write(fa.data() + at, fa.size() - at);
          // A heartbeat, B, D and C in one write.
          auto more = FakePeer::frame(FrameKind::heartbeat, Tag{}, {}, 0);
          for (const auto& f : {FakePeer::data(kTagB, b), FakePeer::data(tag_d, d),
                                FakePeer::data(kTagC, c)}) {
            more.insert(more.end(), f.begin(), f.end());
          }
          p.write(more.data(), more.size());
          const auto bye = FakePeer::frame(FrameKind::bye, Tag{}, {}, 0);
          p.write(bye.data(), bye.size());
        });
    CHECK(got_a == a);
    CHECK(got_b == b);
    CHECK(got_c == c);
    CHECK(got_d == d);
  }
}

// Rank 0 posts one receive into `buf` and waits; returns the error it failed with ("" if none).
std::string wait_error(std::vector<std::byte>& buf, const std::function<void(FakePeer&)>& peer) {
  std::string error;
  with_fake_peer(
      false,
      [&](TcpTransport& t) {
        auto h = t.recv(1, kTagA, buf);
        try {
          t.wait(h);
        } catch (const dpg::Error& e) {
          error = e.what();
        }
      },
      peer);
  return error;
}

TEST_CASE("wire: a frame longer than its receive is refused before it is read, naming the peer") {
  std::vector<std::byte> small(10);
  const std::string error = wait_error(small, [](FakePeer& p) {
    const auto f = FakePeer::data(kTagA, pattern(1000, 4));
    p.write(f.data(), f.size());
  });
  CHECK(error.find("peer 1 sent 1000 bytes") != std::string::npos);
  CHECK(error.find("expects 10") != std::string::npos);
  CHECK(small == std::vector<std::byte>(10));  // nothing was written into it
}

TEST_CASE("wire: a malformed header fails the wait, naming the peer") {
  std::vector<std::byte> buf(16);
  const std::string error = wait_error(buf, [](FakePeer& p) {
    const auto junk = pattern(dpg::net::kHeaderBytes, 5);
    p.write(junk.data(), junk.size());
  });
  CHECK(error.find("peer 1 sent a malformed frame") != std::string::npos);
}

TEST_CASE("wire: a stream cut off inside a payload fails the wait, naming the peer") {
  std::vector<std::byte> buf(5000);
  const std::string error = wait_error(buf, [&](FakePeer& p) {
    const auto f = FakePeer::data(kTagA, pattern(buf.size(), 6));
    p.write(f.data(), f.size() / 2);
    p.close();
  });
  CHECK(error.find("connection to peer 1 lost while receiving") != std::string::npos);
}

TEST_CASE("wire: a corrupt, oversized or out-of-place header fails the wait, naming the peer") {
  struct Case {
    const char* name;
    std::vector<std::byte> bytes;
    const char* want;
  };
  auto header = [](FrameKind kind, uint64_t length) {
    return FakePeer::frame(kind, kTagA, {}, length);
  };
  std::vector<Case> cases;
  auto flipped = header(FrameKind::data, 16);
  flipped[13] ^= std::byte{0x10};  // the tag's chunk, under the checksum
  cases.push_back({"flipped bit", flipped, "checksum mismatch"});
  cases.push_back({"oversized", header(FrameKind::data, dpg::net::kMaxDataBytes + 1),
                   "data frame of 1099511627777 bytes"});
  cases.push_back({"long abort", header(FrameKind::abort, dpg::net::kMaxAbortBytes + 1),
                   "abort frame of 4097 bytes"});
  cases.push_back({"late hello", header(FrameKind::hello, dpg::net::kHelloBytes),
                   "a hello frame after the handshake"});
  for (const auto& c : cases) {
    CAPTURE(c.name);
    std::vector<std::byte> buf(16);
    const std::string error = wait_error(buf, [&](FakePeer& p) { p.write(c.bytes.data(), c.bytes.size()); });
    CHECK(error.find("peer 1 sent a malformed frame") != std::string::npos);
    CHECK(error.find(c.want) != std::string::npos);
    CHECK(buf == std::vector<std::byte>(16));
  }
}
