#include "runtime/net/shm/shm_socket.h"

#include <poll.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace dpg::net::shm_socket {

std::string errno_text(int e) { return std::strerror(e); }

socklen_t abstract_address(const std::string& name, sockaddr_un& addr) {
  std::memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

// Waits until fd is ready for `events` or the deadline passes; false at the deadline.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count() + 1, 1000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

// Sends all of `bytes` with `fds` attached; empty on success, else why not.
std::string send_all(int fd, const void* bytes, std::size_t n, const std::vector<int>& fds,
                     Clock::time_point deadline) {
  const auto* p = static_cast<const char*>(bytes);
  bool with_fds = !fds.empty();
  while (n > 0) {
    iovec iov{const_cast<char*>(p), n};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
    if (with_fds) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
      std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
    }
    const ssize_t sent = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      p += sent;
      n -= static_cast<std::size_t>(sent);
      with_fds = false;  // they went with the first byte
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, POLLOUT, deadline)) return "timed out sending";
      continue;
    }
    return "send failed: " + errno_text(errno);
  }
  return "";
}

// Receives exactly n bytes; descriptors that come with them are appended to `fds` (at most
// `max_fds`; more, or a truncated control message, is an error). Empty on success.
std::string recv_all(int fd, void* bytes, std::size_t n, std::vector<Fd>& fds, std::size_t max_fds,
                     Clock::time_point deadline) {
  auto* p = static_cast<char*>(bytes);
  while (n > 0) {
    iovec iov{p, n};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t got = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, POLLIN, deadline)) return "timed out waiting for its hello";
      continue;
    }
    if (got < 0) return "receive failed: " + errno_text(errno);
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.emplace_back(received);  // owned from here, so closed on every path
      }
    }
    if (msg.msg_flags & MSG_CTRUNC) return "it sent more descriptors than a handshake carries";
    if (fds.size() > max_fds) return "it sent " + std::to_string(fds.size()) + " descriptors";
    if (got == 0) return "it closed the connection during the handshake";
    p += got;
    n -= static_cast<std::size_t>(got);
  }
  return "";
}

// The user of the process at the other end of a Unix socket; -1 when unknown.
bool peer_cred(int fd, ucred& cred) {
  socklen_t len = sizeof cred;
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0;
}

// Whether this process can read `pid`'s word at `address` and finds `value` there.
bool probe_read(pid_t pid, uint64_t address, uint64_t value) {
  uint64_t got = 0;
  iovec local{&got, sizeof got};
  iovec remote{reinterpret_cast<void*>(address), sizeof got};
  return ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == sizeof got && got == value;
}

bool is_eventfd(int fd) {
  std::error_code ec;
  const auto target = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd), ec);
  return !ec && target.string() == "anon_inode:[eventfd]";
}

}  // namespace dpg::net::shm_socket
