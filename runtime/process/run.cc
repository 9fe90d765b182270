#include "runtime/process/run.h"

#include <poll.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "runtime/process/output.h"
#include "runtime/core/error.h"

namespace dpg::proc {
namespace {

using std::chrono::milliseconds;

bool reads_pipe(const Stdio& s) {
  return s.kind == Stdio::Kind::capture || s.kind == Stdio::Kind::prefixed;
}

std::optional<Drain> drain_for(const Stdio& s, int fd, size_t limit, Sink& sink) {
  if (fd < 0) return std::nullopt;
  if (s.kind == Stdio::Kind::prefixed) return Drain::prefixed(fd, s.prefix, sink);
  return Drain::capture(fd, limit);
}

}  // namespace

RunResult run(const Command& command, const RunOptions& o) {
  if (o.timeout.count() <= 0 || o.grace.count() < 0 || o.drain.count() < 0)
    fail(Code::invalid_argument, "run: timeout must be > 0, grace and drain >= 0");
  SpawnOptions so;
  so.out = reads_pipe(o.out) ? Stdio::pipe() : o.out;
  so.err = reads_pipe(o.err) ? Stdio::pipe() : o.err;
  so.stop_grace = o.grace;
  so.what = o.what;
  const auto start = Clock::now();
  const auto deadline = start + o.timeout;
  Process child = Process::spawn(command, so);
  const std::string& what = child.what();
  Sink out_sink(1), err_sink(2);
  std::optional<Drain> drains[2] = {
      drain_for(o.out, child.take_out_fd(), o.capture_limit_bytes, out_sink),
      drain_for(o.err, child.take_err_fd(), o.capture_limit_bytes, err_sink)};
  auto check_overflow = [&] {
    for (int i = 0; i < 2; ++i) {
      if (!drains[i] || drains[i]->dropped_bytes() == 0) continue;
      const auto end = child.terminate(o.grace);
      fail(Code::out_of_range,
           what + " printed more than " + std::to_string(o.capture_limit_bytes) + " bytes on " +
               (i == 0 ? "stdout" : "stderr") + "; stopped it (" +
               (end ? describe_status(*end) : std::string("it did not exit")) + ")");
    }
  };
  std::optional<Clock::time_point> drain_until;
  std::vector<pollfd> fds;
  while (true) {
    check_overflow();
    const auto now = Clock::now();
    if (child.poll() && !drain_until) drain_until = now + o.drain;
    bool open = false;
    for (auto& d : drains) open = open || (d && d->open());
    if (drain_until && (!open || now >= *drain_until)) break;
    if (now >= deadline) {
      const auto end = child.terminate(o.grace);
      fail(Code::deadline_exceeded,
           what + " did not finish within " + duration_text(o.timeout) + "; stopped (SIGTERM, " +
               "SIGKILL " + duration_text(o.grace) + " later): " +
               (end ? describe_status(*end) : std::string("it did not exit even then")));
    }
    if (!open) {  // nothing to read: wait for the exit alone
      child.wait_until(deadline);
      continue;
    }
    fds.clear();
    for (auto& d : drains) {
      if (d && d->open()) fds.push_back({d->fd(), POLLIN, 0});
    }
    // The exit is not a file descriptor: look at it every 50 ms while the pipes are quiet.
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - now).count();
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<long long>(left, 50)) + 1);
    if (ready < 0 && errno != EINTR)
      fail(Code::internal, what + ": poll on its output: " + std::strerror(errno));
    for (auto& d : drains) {
      if (d && d->open()) d->read_some(16);
    }
  }
  RunResult r;
  for (int i = 0; i < 2; ++i) {
    if (!drains[i]) continue;
    drains[i]->read_some(1);
    drains[i]->close();
  }
  check_overflow();
  for (int i = 0; i < 2; ++i) {
    if (drains[i]) (i == 0 ? r.out : r.err) = drains[i]->text();
  }
  r.status = *child.status();
  r.elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  return r;
}

}  // namespace dpg::proc
