#include "apps/bench/limits.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/error.h"

namespace dpg::app {
namespace {

using Clock = std::chrono::steady_clock;

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void sys_fail(const char* what) {
  fail(Code::unavailable, std::string("tcp loopback limit: ") + what + ": " + std::strerror(errno));
}

// Sends `total` bytes in `chunk`-sized writes; the whole buffer or an error.
void send_all(int fd, const std::vector<char>& chunk, std::size_t total) {
  for (std::size_t sent = 0; sent < total;) {
    const std::size_t n = std::min(chunk.size(), total - sent);
    const ssize_t w = ::send(fd, chunk.data(), n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      sys_fail("send");
    }
    sent += static_cast<std::size_t>(w);
  }
}

void recv_all(int fd, std::vector<char>& chunk, std::size_t total) {
  for (std::size_t got = 0; got < total;) {
    const ssize_t r = ::recv(fd, chunk.data(), std::min(chunk.size(), total - got), 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      sys_fail("recv");
    }
    if (r == 0) fail(Code::unavailable, "tcp loopback limit: the connection closed early");
    got += static_cast<std::size_t>(r);
  }
}

// One run: seconds until `total` bytes went from one end to the other.
double stream_seconds(std::size_t total, std::size_t chunk_bytes) {
  Fd listener{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (listener.fd < 0) sys_fail("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) sys_fail("bind");
  if (::listen(listener.fd, 1) != 0) sys_fail("listen");
  if (::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    sys_fail("getsockname");
  }
  Fd a{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (a.fd < 0) sys_fail("socket");
  if (::connect(a.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) sys_fail("connect");
  Fd b{::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC)};
  if (b.fd < 0) sys_fail("accept");
  for (int fd : {a.fd, b.fd}) {
    const int one = 1;  // as the transport sets it
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  std::vector<char> out(chunk_bytes, 'a'), in(chunk_bytes);
  std::exception_ptr error;
  const auto t0 = Clock::now();
  std::thread sender([&] {
    try {
      send_all(a.fd, out, total);
    } catch (...) {
      error = std::current_exception();
    }
  });
  try {
    recv_all(b.fd, in, total);
  } catch (...) {
    ::shutdown(a.fd, SHUT_RDWR);  // the sender's send returns
    sender.join();
    throw;
  }
  sender.join();
  if (error) std::rethrow_exception(error);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

double memcpy_GBps() {
  constexpr std::size_t kBytes = 64 << 20;
  std::vector<std::byte> a(kBytes, std::byte{1}), b(kBytes, std::byte{2});
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), kBytes);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, kBytes / s / 1e9);
  }
  return best;
}

double tcp_loopback_GBps() {
  constexpr std::size_t kTotal = 256 << 20, kChunk = 4 << 20;
  double best = 0;
  for (int i = 0; i < 3; ++i) best = std::max(best, kTotal / stream_seconds(kTotal, kChunk) / 1e9);
  return best;
}

}  // namespace dpg::app
