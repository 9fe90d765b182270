#include "runtime/core/trace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "runtime/core/error.h"

namespace dpg::trace {
namespace {

int64_t ns_of(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

void append_int(std::string& out, long long v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// Nanoseconds as microseconds with three decimals: 1234567 -> "1234.567".
void append_us(std::string& out, int64_t ns) {
  if (ns < 0) {
    out += '-';
    ns = -ns;
  }
  append_int(out, ns / 1000);
  char frac[4] = {'.', char('0' + (ns / 100) % 10), char('0' + (ns / 10) % 10), char('0' + ns % 10)};
  out.append(frac, 4);
}

void append_double(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

void append_string(std::string& out, const char* s) {
  out += '"';
  for (; *s != '\0'; ++s) {
    const unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      static const char hex[] = "0123456789abcdef";
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += char(c);
    }
  }
  out += '"';
}

void append_arg(std::string& out, bool& first, const char* key, long long v) {
  if (v == Args::none) return;
  out += first ? "\"" : ",\"";
  first = false;
  out += key;
  out += "\":";
  append_int(out, v);
}

std::atomic<int> next_thread_id{1};

}  // namespace

int Tracer::thread_id() noexcept {
  thread_local int id = next_thread_id.fetch_add(1, std::memory_order_relaxed);
  return id;
}

Tracer::~Tracer() {
  try {
    close();
  } catch (...) {
  }
}

void Tracer::fail_write(const std::string& what, int err) {
  std::string message = "trace: " + what + " " + path_ + ": " + std::strerror(err);
  {
    std::lock_guard lk(mu_);
    if (failure_.empty()) failure_ = message;
    on_.store(false, std::memory_order_relaxed);
  }
  throw Error(Code::unavailable, message);
}

void Tracer::write_at_tail(const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::pwrite(fd_, text.data() + done, text.size() - done, tail_ + (long long)done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      if (tail_ > 0 && done > 0) {
        // Put the closing bracket back where the last good batch ended, so the file still parses.
        (void)!::pwrite(fd_, "\n]\n", 3, tail_);
        (void)!::ftruncate(fd_, tail_ + 3);
      }
      fail_write("cannot write", err);
    }
    done += std::size_t(n);
  }
}

void Tracer::open(const std::string& path, int pid, const std::string& process_name,
                  Options options) {
  std::lock_guard wl(write_mu_);
  if (fd_ >= 0) fail(Code::failed_precondition, "trace: " + path_ + " is already open");
  if (options.flush_events == 0) fail(Code::invalid_argument, "trace: flush_events must be positive");
  path_ = path;
  pid_ = pid;
  options_ = options;
  interval_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(options.flush_interval).count();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    fail(err == ENOENT ? Code::not_found : Code::unavailable,
         "trace: cannot create " + path + ": " + std::strerror(err));
  }
  fd_ = fd;
  tail_ = 0;
  written_ = 0;
  std::string head = "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"ts\":0,\"pid\":";
  append_int(head, pid);
  head += ",\"tid\":0,\"args\":{\"name\":";
  append_string(head, process_name.c_str());
  head += "}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"ts\":0,\"pid\":";
  append_int(head, pid);
  head += ",\"tid\":0,\"args\":{\"sort_index\":";
  append_int(head, pid);
  head += "}}";
  const long long body = (long long)head.size();
  head += "\n]\n";
  try {
    write_at_tail(head);
  } catch (...) {
    // Nothing half-written: the file this open created or emptied goes (a device such as
    // /dev/full stays).
    struct stat st {};
    if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode)) ::unlink(path.c_str());
    ::close(fd_);
    fd_ = -1;
    std::lock_guard lk(mu_);
    failure_.clear();
    throw;
  }
  tail_ = body;
  buffer_.reserve(options.flush_events);
  batch_.reserve(options.flush_events);
  text_.reserve(options.flush_events * 192);
  std::lock_guard lk(mu_);
  failure_.clear();
  buffer_.clear();
  last_flush_ns_ = ns_of(Clock::now());
  on_.store(true, std::memory_order_relaxed);
}

void Tracer::record(Event event) {
  event.tid = thread_id();
  if (event.args.step == Args::none) event.args.step = step_.load(std::memory_order_relaxed);
  bool flush_now = false;
  {
    std::lock_guard lk(mu_);
    if (!on()) return;  // closed or failed since the caller's check
    buffer_.push_back(event);
    const int64_t t = ns_of(event.ph == 'X' ? event.end : event.begin);
    if (buffer_.size() >= options_.flush_events || t - last_flush_ns_ >= interval_ns_) {
      flush_now = true;
      last_flush_ns_ = t;  // one thread flushes, the others go on
    }
  }
  if (flush_now) flush_batch(true);
}

void Tracer::flush_batch(bool rethrow) {
  std::lock_guard wl(write_mu_);
  {
    std::lock_guard lk(mu_);
    if (!failure_.empty()) {
      if (rethrow) throw Error(Code::unavailable, failure_);
      return;
    }
    if (fd_ < 0 || buffer_.empty()) return;
    batch_.swap(buffer_);  // buffer_ takes batch_'s empty storage, capacity kept
    last_flush_ns_ = ns_of(Clock::now());
  }
  text_.clear();
  for (const Event& e : batch_) {
    text_ += ",\n{\"name\":";
    if (e.ph == 'M') {
      text_ += "\"thread_name\",\"ph\":\"M\",\"ts\":0,\"pid\":";
      append_int(text_, pid_);
      text_ += ",\"tid\":";
      append_int(text_, e.tid);
      text_ += ",\"args\":{\"name\":";
      append_string(text_, e.name);
      text_ += "}}";
      continue;
    }
    append_string(text_, e.name);
    if (e.category != nullptr) {
      text_ += ",\"cat\":";
      append_string(text_, e.category);
    }
    text_ += ",\"ph\":\"";
    text_ += e.ph;
    text_ += "\",\"ts\":";
    append_us(text_, ns_of(e.begin));
    if (e.ph == 'X') {
      text_ += ",\"dur\":";
      append_us(text_, ns_of(e.end) - ns_of(e.begin));
    }
    text_ += ",\"pid\":";
    append_int(text_, pid_);
    text_ += ",\"tid\":";
    append_int(text_, e.tid);
    text_ += ",\"args\":{";
    if (e.ph == 'C') {
      append_string(text_, e.name);
      text_ += ':';
      append_double(text_, e.value);
    } else {
      bool first = true;
      append_arg(text_, first, "peer", e.args.peer);
      append_arg(text_, first, "bytes", e.args.bytes);
      append_arg(text_, first, "step", e.args.step);
      append_arg(text_, first, "op", e.args.op);
      append_arg(text_, first, "round", e.args.round);
      append_arg(text_, first, "chunk", e.args.chunk);
    }
    text_ += "}}";
  }
  const long long body = (long long)text_.size();
  text_ += "\n]\n";
  const std::size_t n = batch_.size();
  batch_.clear();
  write_at_tail(text_);  // throws (and records the failure) when the write fails
  tail_ += body;
  written_ += n;
}

void Tracer::flush() { flush_batch(true); }

void Tracer::close() {
  {
    std::lock_guard lk(mu_);
    on_.store(false, std::memory_order_relaxed);
  }
  try {
    flush_batch(false);
  } catch (const Error&) {
    // kept in failure_, thrown below
  }
  std::string failure;
  {
    std::lock_guard wl(write_mu_);
    if (fd_ >= 0) {
      const int rc = ::close(fd_);
      fd_ = -1;
      if (rc != 0) {
        const int err = errno;
        std::lock_guard lk(mu_);
        if (failure_.empty()) failure_ = "trace: cannot close " + path_ + ": " + std::strerror(err);
      }
    }
    std::lock_guard lk(mu_);
    failure.swap(failure_);
    buffer_.clear();
  }
  if (!failure.empty()) throw Error(Code::unavailable, failure);
}

std::size_t Tracer::written() const {
  std::lock_guard wl(write_mu_);
  return written_;
}

std::string read_trace_part(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(Code::not_found, "trace: cannot read part " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(Code::data_loss, "trace: error reading part " + path);
  return text.str();
}

namespace {

std::string_view trim(std::string_view s) {
  const char* ws = " \t\r\n";
  const auto b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// Whether `s` is exactly one balanced JSON object (braces and brackets outside strings).
bool one_object(std::string_view s) {
  if (s.empty() || s.front() != '{') return false;
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      if (--depth < 0) return false;
      if (depth == 0 && i + 1 != s.size()) return false;
    }
  }
  return depth == 0 && !in_string;
}

}  // namespace

std::string merge_trace_parts(std::span<const std::string> parts) {
  std::string out = "{\"traceEvents\":[";
  bool first = true;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const std::string_view part = trim(parts[p]);
    if (part.empty() || part.front() != '[')
      fail(Code::data_loss, "trace: part " + std::to_string(p) + " is not a JSON array");
    const bool closed = part.back() == ']';
    std::size_t pos = 1;
    std::size_t line_no = 0;
    std::vector<std::string_view> lines;
    while (pos < part.size()) {
      std::size_t nl = part.find('\n', pos);
      if (nl == std::string_view::npos) nl = part.size();
      lines.push_back(part.substr(pos, nl - pos));
      pos = nl + 1;
    }
    for (std::size_t i = 0; i < lines.size(); ++i) {
      ++line_no;
      std::string_view line = trim(lines[i]);
      if (closed && i + 1 == lines.size()) line = trim(line.substr(0, line.size() - 1));  // the `]`
      if (!line.empty() && line.back() == ',') line = trim(line.substr(0, line.size() - 1));
      if (line.empty()) continue;
      if (!one_object(line)) {
        if (!closed && i + 1 == lines.size()) break;  // the torn tail of a killed writer
        fail(Code::data_loss, "trace: part " + std::to_string(p) + " line " +
                                  std::to_string(line_no + 1) + " is not one event object");
      }
      out += first ? "\n" : ",\n";
      first = false;
      out += line;
    }
  }
  out += "\n],\"displayTimeUnit\":\"ms\"}\n";
  return out;
}

}  // namespace dpg::trace
