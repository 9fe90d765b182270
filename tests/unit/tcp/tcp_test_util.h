// Shared by the TCP tests: peers as threads of this process over loopback.
#pragma once

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/collective/communicator.h"
#include "runtime/core/error.h"
#include "runtime/net/hosts.h"
#include "runtime/net/tcp/tcp_transport.h"

namespace dpg::test {

// Changes one rank's options or its copy of the hosts file (its secret, its TLS files).
using PerRank = std::function<void(int rank, net::TcpOptions&, net::HostsFile&)>;

// Runs body on one thread per peer of `hosts` over TCP; returns each rank's error message (""
// when it passed). Each rank connects to `peers[rank]`, or by default to what a communicator
// needs.
inline std::vector<std::string> run_tcp_on(const net::HostsFile& hosts, net::TcpOptions o,
                                           const std::function<void(net::TcpTransport&)>& body,
                                           const PerRank& per_rank = {},
                                           const std::vector<std::vector<int>>& peers = {}) {
  const int n = hosts.world();
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        net::TcpOptions mine = o;
        net::HostsFile h = hosts;
        if (per_rank) per_rank(r, mine, h);
        net::TcpTransport t(h, r,
                            peers.empty() ? collective::peers_needed(r, n, {}) : peers[r], mine);
        body(t);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

inline std::vector<std::string> run_tcp(int n, net::TcpOptions o,
                                        const std::function<void(net::TcpTransport&)>& body,
                                        const PerRank& per_rank = {},
                                        const std::vector<std::vector<int>>& peers = {}) {
  return run_tcp_on(net::local_hosts(n), o, body, per_rank, peers);
}

// Rank 0 sends 32 MiB to rank 1, which does not read yet, so the socket takes only part of it
// and the rest waits to be written. Then the buffer becomes the caller's again, who overwrites it
// (as freed memory would be reused) and closes the transport, which still flushes what it has to
// say; rank 1 reads, and nothing it gets may come from the overwritten buffer. The buffer
// becomes the caller's:
// - wait_fails: when rank 0's wait passes its deadline (500 ms) and throws; rank 0 catches that
//   and closes the transport as usual;
// - unwinds: when rank 0 leaves without waiting, on an error of its own, the transport closing
//   as the stack unwinds.
// The buffer outlives the transport, so that a write still reading it would send what was
// written over it rather than fail on memory handed back.
enum class GivenBack { wait_fails, unwinds };
inline void check_failed_send_detached(const net::HostsFile& hosts, net::TcpOptions o,
                                       GivenBack how) {
  using namespace std::chrono_literals;
  o.timeout = 500ms;
  constexpr std::size_t kBytes = 32u << 20;
  std::atomic<bool> overwritten{false};
  std::vector<std::byte> data(kBytes, std::byte{0x11});
  std::vector<std::byte> got(kBytes, std::byte{0});
  std::string failed_wait;
  auto errors = run_tcp_on(hosts, o, [&](net::TcpTransport& t) {
    const net::Tag tag{7, 1, 0};
    if (t.rank() == 0) {
      const net::Handle h = t.send(1, tag, data);
      if (how == GivenBack::wait_fails) {
        try {
          t.wait(h);
        } catch (const Error& e) {
          failed_wait = e.what();
        }
      } else {
        std::this_thread::sleep_for(200ms);  // its writer takes what the socket takes
      }
      std::fill(data.begin(), data.end(), std::byte{0xAB});
      overwritten = true;
      if (how == GivenBack::unwinds) throw Error(Code::aborted, "rank 0: stopping on purpose");
      return;
    }
    for (int i = 0; i < 500 && !overwritten; ++i) std::this_thread::sleep_for(10ms);
    t.wait(t.recv(0, tag, got));
  });
  CAPTURE(failed_wait);
  CAPTURE(errors[0]);
  CAPTURE(errors[1]);
  if (how == GivenBack::wait_fails) CHECK(failed_wait.find("timed out") != std::string::npos);
  CHECK(std::count(got.begin(), got.end(), std::byte{0xAB}) == 0);
}

// Rank 0 of two, on a thread of its own, waiting for one message from rank 1 while the test
// sends other clients to its port; genuine_join() then runs the real rank 1, which sends it.
class RankZeroWaits {
 public:
  RankZeroWaits(const net::HostsFile& hosts, net::TcpOptions o)
      : hosts_(hosts), options_(o), got_(1000), sent_(1000, std::byte{0x33}) {
    thread_ = std::thread([this] {
      try {
        net::TcpTransport t(hosts_, 0, {1}, options_);
        t.wait(t.recv(1, kTag, got_));
      } catch (const Error& e) {
        error0_ = e.what();
      }
    });
  }
  ~RankZeroWaits() {
    if (thread_.joinable()) thread_.join();
  }
  RankZeroWaits(const RankZeroWaits&) = delete;
  RankZeroWaits& operator=(const RankZeroWaits&) = delete;

  // Returns the errors of rank 0 and rank 1, "" each when it passed; checks the bytes arrived.
  std::pair<std::string, std::string> genuine_join() {
    std::string error1;
    try {
      net::TcpTransport one(hosts_, 1, {0}, options_);
      one.wait(one.send(0, kTag, sent_));
    } catch (const Error& e) {
      error1 = e.what();
    }
    thread_.join();
    if (error0_.empty() && error1.empty() && got_ != sent_) error0_ = "rank 0 received other bytes";
    return {error0_, error1};
  }

 private:
  static constexpr net::Tag kTag{7, 1, 0};
  net::HostsFile hosts_;
  net::TcpOptions options_;
  std::vector<std::byte> got_, sent_;
  std::string error0_;
  std::thread thread_;
};

// A socket connected to 127.0.0.1:port, retried for up to 10 s while nothing listens; -1 if none.
// `from`: the local address to connect from (host order; 0: any), such as 127.0.0.2 for a
// client that is not on the hosts file's 127.0.0.1.
inline int connect_loopback(int port, uint32_t from = 0) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (from != 0) {
      sockaddr_in local{};
      local.sin_family = AF_INET;
      local.sin_addr.s_addr = htonl(from);
      if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
        ::close(fd);
        return -1;
      }
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

}  // namespace dpg::test
