// Reading a child's output pipe: into memory, bounded, or onto one of this process's streams line
// by line behind a prefix ("[3] epoch 1 ..."), so that the lines of several children running at
// once stay whole.
#pragma once

#include <cstddef>
#include <string>

namespace dpg::proc {

// Where prefixed lines go: a file descriptor written in full, shared by every Drain writing to
// it. A sink whose reader went away (EPIPE) or that stays full for ten seconds is given up
// (later writes are dropped), so a stuck terminal never stops the supervision.
class Sink {
 public:
  explicit Sink(int fd) : fd_(fd) {}
  void put(const std::string& bytes);
  bool broken() const { return broken_; }

 private:
  int fd_;
  bool broken_ = false;
};

// One output pipe of a child (non-blocking read end; the Drain closes it at end of file or when
// destroyed).
class Drain {
 public:
  // A line longer than this without a newline is split, so one line never holds more memory.
  static constexpr size_t kMaxLineBytes = 64 * 1024;

  // Keeps up to `limit_bytes` in text(); what comes after is read and dropped, and counted in
  // dropped_bytes(), so a chatty child cannot fill memory nor block on a full pipe.
  static Drain capture(int fd, size_t limit_bytes);
  // Writes each complete line to `sink` as prefix + line + "\n"; a last line without a newline
  // is written at end of file. `sink` must outlive the Drain.
  static Drain prefixed(int fd, std::string prefix, Sink& sink);

  Drain(Drain&& other) noexcept;
  Drain& operator=(Drain&& other) noexcept;
  Drain(const Drain&) = delete;
  Drain& operator=(const Drain&) = delete;
  ~Drain();

  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  // Reads what the pipe holds, at most `max_reads` reads of 64 KiB, without blocking; at end of
  // file (or a read error) flushes the last partial line and closes the pipe.
  void read_some(int max_reads);
  // Flushes the partial line and closes the pipe, whatever is still unread in it (a grandchild
  // may hold its write end open for ever).
  void close();

  const std::string& text() const { return text_; }
  size_t dropped_bytes() const { return dropped_; }

 private:
  Drain(int fd, size_t limit, std::string prefix, Sink* sink)
      : fd_(fd), limit_(limit), prefix_(std::move(prefix)), sink_(sink) {}
  void emit(bool at_eof);

  int fd_ = -1;
  size_t limit_ = 0;
  std::string prefix_;
  Sink* sink_ = nullptr;  // null: capture
  std::string text_;      // capture: what was kept; prefixed: the start of a line not yet ended
  size_t dropped_ = 0;
};

}  // namespace dpg::proc
