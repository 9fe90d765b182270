#include "runtime/core/json_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <vector>
#include <sstream>

#include "runtime/core/bounds.h"
#include "runtime/core/error.h"

namespace dpg {

namespace {

// "a FIFO", "a folder", ... for a file type that is not a regular file.
std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

}  // namespace

void read_regular_file_chunks(const std::string& path, std::size_t max_bytes,
                              const std::string& what,
                              const std::function<void(std::string_view)>& take) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    fail(Code::not_found, path + ": cannot open file: " + std::strerror(errno));
  }
  const auto refuse_kind = [&](mode_t mode) {
    fail(Code::invalid_argument, path + ": is " + kind_of(mode) + ", not " + what +
                                     " (inputs are read from regular files only)");
  };
  if (!S_ISREG(st.st_mode)) refuse_kind(st.st_mode);
  const auto too_long = [&] {
    fail(Code::invalid_argument, path + ": longer than " + bytes_text(max_bytes) +
                                     ", the most " + what + " may weigh");
  };
  if (static_cast<std::uintmax_t>(st.st_size) > max_bytes) too_long();
  // Without blocking: the path may have been swapped for a FIFO since (checked again below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(Code::not_found, path + ": cannot open file: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) refuse_kind(st.st_mode);
  std::size_t total = 0;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(Code::invalid_argument, path + ": read failed: " + std::strerror(errno));
    if (n == 0) break;
    total += static_cast<std::size_t>(n);
    if (total > max_bytes) too_long();  // it grew
    take(std::string_view(buf, static_cast<std::size_t>(n)));
  }
}

std::string read_regular_file(const std::string& path, std::size_t max_bytes,
                              const std::string& what) {
  std::string text;
  std::error_code ec;  // a size to reserve, when it can be had and is within the bound
  if (const auto size = std::filesystem::file_size(path, ec); !ec && size <= max_bytes) {
    text.reserve(static_cast<std::size_t>(size));
  }
  read_regular_file_chunks(path, max_bytes, what, [&](std::string_view piece) {
    text.append(piece);
  });
  return text;
}

Json read_json_file(const std::string& path) {
  return parse_json_text(read_regular_file(path, kMaxJsonFileBytes, "a JSON file"), path);
}

Json parse_json_text(std::string_view text, const std::string& where) {
  // nlohmann keeps the last of two equal keys silently; a config or hosts file that says one
  // thing twice is more likely a mistake than a wish, so the parse refuses it.
  std::vector<std::set<std::string>> keys;  // of each object being parsed
  std::string duplicate;
  const Json::parser_callback_t check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    const bool opens = event == Json::parse_event_t::object_start ||
                       event == Json::parse_event_t::array_start;
    if (opens && depth >= kMaxJsonDepth) {
      fail(Code::invalid_argument, where + ": nested more than " + std::to_string(kMaxJsonDepth) +
                                       " levels deep, the most a JSON input may be");
    }
    switch (event) {
      case Json::parse_event_t::object_start: keys.emplace_back(); break;
      case Json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default: break;
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(), check);
  } catch (const Json::exception& e) {
    // parse_error for bad syntax, and out_of_range (406) for a number too large for a double
    // ("1e400"): both are the file's fault, not a bug here.
    fail(Code::invalid_argument, where + ": not valid JSON: " + e.what());
  }
  if (!duplicate.empty()) {
    fail(Code::invalid_argument,
         where + ": the key \"" + shorten(duplicate) + "\" appears twice in one object");
  }
  return j;
}

std::string quote(const Json& v) { return shorten(v.dump()); }

namespace {

// Writes all of `bytes` to fd, retrying short writes and EINTR; errno on failure.
int write_all(int fd, std::string_view bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

int fsync_retry(int fd) {
  while (::fsync(fd) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes,
                       const AtomicWriteOptions& options) {
  // The rename would put a regular file in the place of a device, a FIFO or a socket (as root,
  // /dev/null or /dev/full for everyone), and report success for bytes nobody reads.
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    fail(Code::failed_precondition,
         path + (S_ISDIR(st.st_mode) ? ": is a folder" : ": is not a regular file (a device, FIFO "
                                                         "or socket)") +
             "; outputs are written to a new file and renamed into place, so name a file");
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                        static_cast<mode_t>(options.mode));
  if (fd < 0) {
    fail(Code::failed_precondition, path + ": cannot create " + tmp + ": " + std::strerror(errno));
  }
  auto give_up = [&](const std::string& what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(Code::failed_precondition, path + ": " + what + ": " + std::strerror(err));
  };
  if (const int err = write_all(fd, bytes)) give_up("write failed", err);
  if (options.durable) {
    if (const int err = fsync_retry(fd)) give_up("fsync failed", err);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(Code::failed_precondition, path + ": write failed at close: " + std::strerror(err));
  }
  if (options.before_rename) options.before_rename();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(Code::failed_precondition, path + ": cannot rename into place: " + std::strerror(err));
  }
  if (options.durable) {
    // The rename is durable only once the folder's entry is on disk.
    std::string dir = std::filesystem::path(path).parent_path().string();
    if (dir.empty()) dir = ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
      fail(Code::failed_precondition, path + ": cannot open its folder to sync it: " +
                                          std::strerror(errno));
    }
    const int err = fsync_retry(dfd);
    ::close(dfd);
    if (err != 0) {
      fail(Code::failed_precondition, path + ": fsync of its folder failed: " + std::strerror(err));
    }
  }
}

JsonReader::JsonReader(const Json& object, std::string where)
    : object_(object), where_(std::move(where)) {
  if (!object_.is_object()) fail(Code::invalid_argument, where_ + ": expected a JSON object");
}

std::string JsonReader::path(const std::string& key) const { return where_ + "/" + key; }

void JsonReader::fail_at(const std::string& key, const std::string& what) const {
  fail(Code::invalid_argument, path(key) + ": " + what);
}

bool JsonReader::has(const std::string& key) const { return object_.contains(key); }

const Json& JsonReader::at(const std::string& key) const {
  if (!has(key)) fail_at(key, "missing");
  return object_.at(key);
}

double JsonReader::number(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_number()) fail_at(key, "expected a number, got " + quote(v));
  return v.get<double>();
}

long long JsonReader::integer(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_number_integer()) fail_at(key, "expected an integer, got " + quote(v));
  return v.get<long long>();
}

bool JsonReader::boolean(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_boolean()) fail_at(key, "expected true or false, got " + quote(v));
  return v.get<bool>();
}

std::string JsonReader::string(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_string()) fail_at(key, "expected a string, got " + quote(v));
  return v.get<std::string>();
}

void JsonReader::reject_unknown(std::initializer_list<std::string_view> known) const {
  for (const auto& [key, value] : object_.items()) {
    bool ok = false;
    for (auto k : known) ok = ok || (k == key);
    if (!ok) fail_at(key, "unknown field");
  }
}

}  // namespace dpg
