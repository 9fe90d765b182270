#include "runtime/process/output.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

namespace dpg::proc {
namespace {

constexpr size_t kReadBytes = 64 * 1024;

// Writes everything, waiting up to a second at a time for a full non-blocking sink; false when
// the reader went away or the sink stays full.
bool write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  int stuck = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      stuck = 0;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN && ++stuck <= 10) {
      pollfd p{fd, POLLOUT, 0};
      (void)::poll(&p, 1, 1000);
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

void Sink::put(const std::string& bytes) {
  if (!broken_ && !bytes.empty()) broken_ = !write_all(fd_, bytes);
}

Drain Drain::capture(int fd, size_t limit_bytes) { return Drain(fd, limit_bytes, {}, nullptr); }

Drain Drain::prefixed(int fd, std::string prefix, Sink& sink) {
  return Drain(fd, 0, std::move(prefix), &sink);
}

Drain::Drain(Drain&& other) noexcept { *this = std::move(other); }

Drain& Drain::operator=(Drain&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    limit_ = other.limit_;
    prefix_ = std::move(other.prefix_);
    sink_ = other.sink_;
    text_ = std::move(other.text_);
    dropped_ = other.dropped_;
  }
  return *this;
}

Drain::~Drain() {
  if (fd_ >= 0) ::close(fd_);
}

// Prefixed: writes every complete line held in text_ (and at end of file the rest) to the sink.
void Drain::emit(bool at_eof) {
  std::string out;
  size_t begin = 0;
  while (begin < text_.size()) {
    const size_t nl = text_.find('\n', begin);
    const size_t end = std::min({nl, text_.size(), begin + kMaxLineBytes});
    if (end != nl && end - begin < kMaxLineBytes && !at_eof) break;  // wait for the rest
    out += prefix_;
    out.append(text_, begin, end - begin);
    out += '\n';
    begin = end == nl ? end + 1 : end;
  }
  text_.erase(0, std::min(begin, text_.size()));
  sink_->put(out);
}

void Drain::read_some(int max_reads) {
  char buf[kReadBytes];
  for (int i = 0; i < max_reads && fd_ >= 0; ++i) {
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n > 0) {
      const size_t got = static_cast<size_t>(n);
      if (sink_) {
        text_.append(buf, got);
        emit(false);
      } else {
        const size_t keep = std::min(got, limit_ - std::min(limit_, text_.size()));
        text_.append(buf, keep);
        dropped_ += got - keep;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    close();  // end of file, or an error: what remains is the last line
  }
}

void Drain::close() {
  if (sink_) emit(true);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace dpg::proc
