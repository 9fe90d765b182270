#include "runtime/process/signals.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "runtime/core/error.h"

namespace dpg::proc {
namespace {

// The write end of the live SignalPipe's pipe, -1 when there is none. A global because a signal
// handler can reach nothing else; lock-free, so safe to read in the handler.
std::atomic<int> g_wake_fd{-1};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_signal(int signo) {
  const int saved = errno;
  const int fd = g_wake_fd.load();
  const unsigned char byte = static_cast<unsigned char>(signo);
  if (fd >= 0) (void)!::write(fd, &byte, 1);  // a full pipe drops the byte: already woken
  errno = saved;
}

}  // namespace

SignalPipe::SignalPipe(std::initializer_list<int> signals) : signals_(signals) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    fail(Code::unavailable, std::string("signal pipe: ") + std::strerror(errno));
  int expected = -1;
  if (!g_wake_fd.compare_exchange_strong(expected, fds[1])) {
    ::close(fds[0]);
    ::close(fds[1]);
    fail(Code::failed_precondition, "another supervisor already handles this process's signals");
  }
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &old_pipe_);
  struct sigaction act {};
  act.sa_handler = on_signal;
  sigemptyset(&act.sa_mask);
  act.sa_flags = SA_RESTART;
  old_.resize(signals_.size());
  for (size_t i = 0; i < signals_.size(); ++i) ::sigaction(signals_[i], &act, &old_[i]);
}

SignalPipe::~SignalPipe() {
  for (size_t i = 0; i < signals_.size(); ++i) ::sigaction(signals_[i], &old_[i], nullptr);
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
  g_wake_fd.store(-1);
  ::close(read_fd_);
  ::close(write_fd_);
}

std::vector<int> SignalPipe::take() {
  std::vector<int> got;
  unsigned char bytes[64];
  ssize_t n;
  while ((n = ::read(read_fd_, bytes, sizeof bytes)) > 0 || (n < 0 && errno == EINTR)) {
    for (ssize_t i = 0; i < n; ++i) got.push_back(bytes[i]);
  }
  return got;
}

}  // namespace dpg::proc
