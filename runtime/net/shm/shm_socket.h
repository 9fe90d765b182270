// The Unix-socket side of the shared-memory set-up (shm_connect.cc): abstract addresses, whole
// messages with descriptors attached (SCM_RIGHTS), the peer's credentials, and the checks of what
// came with them. Every wait is bounded by a deadline.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/net/shm/shm_impl.h"

namespace dpg::net::shm_socket {

using Clock = std::chrono::steady_clock;

std::string errno_text(int e);
// The address of `name` in the abstract namespace (no file), and its length.
socklen_t abstract_address(const std::string& name, sockaddr_un& addr);
// Waits until fd is ready for `events`; false at the deadline.
bool wait_for(int fd, short events, Clock::time_point deadline);
// Sends all of `bytes` with `fds` attached to the first byte; empty on success, else why not.
std::string send_all(int fd, const void* bytes, std::size_t n, const std::vector<int>& fds,
                     Clock::time_point deadline);
// Receives exactly n bytes; descriptors that come with them are appended to `fds`, owned (more
// than `max_fds`, or a truncated control message, is an error). Empty on success.
std::string recv_all(int fd, void* bytes, std::size_t n, std::vector<Fd>& fds, std::size_t max_fds,
                     Clock::time_point deadline);
// The credentials of the process at the other end (SO_PEERCRED).
bool peer_cred(int fd, ucred& cred);
// Whether this process can read `pid`'s word at `address` (process_vm_readv) and finds `value`.
bool probe_read(pid_t pid, uint64_t address, uint64_t value);
// Whether fd is an eventfd (what /proc/self/fd says it is).
bool is_eventfd(int fd);

}  // namespace dpg::net::shm_socket
