// Signals to a supervising process, turned into bytes on a pipe (the self-pipe trick): the
// handler only write()s the signal number, which is async-signal-safe, and the supervisor reads
// them in its own loop, next to its children's output, and acts there.
#pragma once

#include <csignal>
#include <initializer_list>
#include <vector>

namespace dpg::proc {

class SignalPipe {
 public:
  // Catches `signals` (SA_RESTART) until destroyed, then puts back what was there before. One at
  // a time per process (a handler can reach only a global): a second throws failed_precondition.
  // SIGPIPE is ignored meanwhile, so a supervisor whose stdout reader went away goes on (its
  // writes fail instead).
  explicit SignalPipe(std::initializer_list<int> signals);
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  // The read end, for poll(): readable when a signal has arrived.
  int fd() const { return read_fd_; }
  // The signals caught since the last call, in the order they arrived (none: empty).
  std::vector<int> take();

 private:
  std::vector<int> signals_;
  std::vector<struct sigaction> old_;
  struct sigaction old_pipe_ {};
  int read_fd_ = -1, write_fd_ = -1;
};

}  // namespace dpg::proc
