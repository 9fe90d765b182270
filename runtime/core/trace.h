// A per-peer timeline in Chrome's Trace Event format (chrome://tracing, Perfetto). A Tracer is a
// value that whoever records is handed (never a global); it is off until open(), and every
// recording call on an off tracer is one branch and allocates nothing. When on, events are kept
// in a buffer and streamed to a part file: `[` + events + `]`, each flush overwriting the closing
// bracket with the new events followed by `]` again (one pwrite at a tracked offset), so the file
// on disk is a JSON array after every flush. Peers' parts are merged into one trace at the end of
// a run (merge_trace_parts, or tools/merge_traces.py when the run died). See docs/TRACE.md.
#pragma once

#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace dpg::trace {

using Clock = std::chrono::steady_clock;  // one clock for every peer on a machine

// The numeric arguments of an event; a field left at `none` is not written. `step` left at none
// takes the tracer's current step (set_step). A fixed struct, not a map: recording allocates nothing.
struct Args {
  static constexpr long long none = LLONG_MIN;
  long long peer = none;
  long long bytes = none;
  long long step = none;
  long long op = none;     // a transport tag's op, round and chunk
  long long round = none;
  long long chunk = none;
};

struct Options {
  std::size_t flush_events = 4096;                      // flush when this many events are buffered
  std::chrono::milliseconds flush_interval{100};        // or when an event ends this long after the last flush
};

class Tracer {
 public:
  Tracer() = default;
  // Flushes and closes an open file; a failure here is dropped (call close() to see it).
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Turns the tracer on: creates (truncates) `path`, writes `[`, the process_name metadata event
  // of `pid` and `]`. Throws dpg::Error naming the path when the file cannot be created or written.
  void open(const std::string& path, int pid, const std::string& process_name, Options options = {});
  // Writes the buffered events. Throws the first write failure, naming the path.
  void flush();
  // Flushes and turns the tracer off; throws the first write failure. A no-op when off.
  void close();

  bool on() const noexcept { return on_.load(std::memory_order_relaxed); }
  const std::string& path() const { return path_; }
  int pid() const { return pid_; }

  // The step written into the args of later events whose own Args::step is none.
  void set_step(long long step) noexcept { step_.store(step, std::memory_order_relaxed); }
  long long step() const noexcept { return step_.load(std::memory_order_relaxed); }

  // A complete event (ph "X") from `begin` to `end`. `name` and `category` must have static storage
  // (string literals): only the pointers are kept until the flush. Throws when the flush it
  // triggers fails; after a failure the tracer is off and flush()/close() rethrow it.
  void complete(const char* name, const char* category, Clock::time_point begin,
                Clock::time_point end, const Args& args = {}) {
    if (!on()) return;
    record(Event{name, category, 'X', begin, end, 0.0, args});
  }
  // A counter sample (ph "C"): a track named `name` with the value `value` at `at`.
  void counter(const char* name, double value, Clock::time_point at) {
    if (!on()) return;
    record(Event{name, nullptr, 'C', at, at, value, Args{}});
  }
  void counter(const char* name, double value) {
    if (!on()) return;
    record(Event{name, nullptr, 'C', Clock::now(), {}, value, Args{}});
  }
  // Names the calling thread's track (ph "M" thread_name), e.g. "server", "comm". Never throws,
  // so a thread may call it first thing: a write that fails in the flush it triggers is kept,
  // and close() (or the next recording call) reports it.
  void name_thread(const char* name) noexcept {
    if (!on()) return;
    try {
      record(Event{name, nullptr, 'M', {}, {}, 0.0, Args{}});
    } catch (...) {
    }
  }

  // The calling thread's small number (1, 2, ... in the order threads first record), the tid.
  static int thread_id() noexcept;
  // Events written to the file so far (after flushes), for tests and reports.
  std::size_t written() const;

 private:
  struct Event {
    const char* name;
    const char* category;
    char ph;
    Clock::time_point begin;
    Clock::time_point end;
    double value;
    Args args;
    int tid = 0;
  };
  void record(Event event);
  void flush_batch(bool rethrow);  // takes write_mu_ then mu_
  void write_at_tail(const std::string& text);
  [[noreturn]] void fail_write(const std::string& what, int err);

  std::atomic<bool> on_{false};
  std::atomic<long long> step_{Args::none};
  std::string path_;
  int pid_ = 0;
  Options options_;
  int64_t interval_ns_ = 0;

  mutable std::mutex mu_;        // guards buffer_, last_flush_ns_, failure_
  std::vector<Event> buffer_;    // recorded, not yet written
  int64_t last_flush_ns_ = 0;
  std::string failure_;          // the first write failure ("" when none)

  mutable std::mutex write_mu_;  // guards the file, batch_, text_, tail_
  int fd_ = -1;
  std::vector<Event> batch_;     // swapped with buffer_ at a flush
  std::string text_;             // the formatted batch, reused
  long long tail_ = 0;           // file offset of the closing `]`
  std::size_t written_ = 0;
};

// A complete event covering the Span's lifetime (or until end()). On an off (or null) tracer it
// records nothing and reads no clock. The destructor never throws: a write failure it triggers
// stays in the tracer and is rethrown by close().
class Span {
 public:
  Span(Tracer* tracer, const char* name, const char* category, const Args& args = {}) noexcept
      : tracer_(tracer != nullptr && tracer->on() ? tracer : nullptr),
        name_(name), category_(category), args_(args) {
    if (tracer_ != nullptr) begin_ = Clock::now();
  }
  Span(Tracer& tracer, const char* name, const char* category, const Args& args = {}) noexcept
      : Span(&tracer, name, category, args) {}
  ~Span() {
    try {
      end();
    } catch (...) {
    }
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  Args& args() noexcept { return args_; }
  // Records the span now (once); throws when the flush it triggers fails.
  void end() {
    if (tracer_ == nullptr) return;
    Tracer* t = tracer_;
    tracer_ = nullptr;
    t->complete(name_, category_, begin_, Clock::now(), args_);
  }

 private:
  Tracer* tracer_;
  const char* name_;
  const char* category_;
  Args args_;
  Clock::time_point begin_{};
};

// The text of one peer's part file. Throws dpg::Error (not_found) naming the path.
std::string read_trace_part(const std::string& path);
// Merges peers' part texts (each a JSON array of events, as a Tracer writes them) into one trace:
// {"traceEvents":[...],"displayTimeUnit":"ms"}. A part cut short by a process killed mid-write
// is repaired by keeping its complete event lines. Throws dpg::Error (data_loss) when a part is
// not a JSON array of one event per line.
std::string merge_trace_parts(std::span<const std::string> parts);

}  // namespace dpg::trace
