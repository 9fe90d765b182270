// Reading JSON files with errors that name the file and the JSON path, and writing any file
// atomically (temporary name, then rename) so that a failure never leaves half a file behind.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace dpg {

using Json = nlohmann::json;

// The most a JSON input (config, hosts file, graph, manifest, ledger) may weigh: far above any
// real one (a hosts file of 65,536 peers is a few MiB), and a bound on what reading a pipe or a
// device costs.
inline constexpr std::size_t kMaxJsonFileBytes = std::size_t{256} << 20;
// The deepest nesting a JSON input may have: real inputs nest 4 deep at most (a graph schedule's
// rounds of edges). Code that walks or prints a document (dump(), comparisons) recurses once per
// level, so a document a few hundred thousand brackets deep would overflow the stack.
inline constexpr int kMaxJsonDepth = 64;

// The bytes of the regular file at `path` (symlinks followed), checked before anything is read:
// a folder, a FIFO, a socket or a device (which may never end, or block open() until a writer
// comes) is refused, and so is a file longer than `max_bytes`; it is opened without blocking and
// read under that bound. Throws Error (not_found: missing or unreadable; invalid_argument: the
// kind or the size) whose message starts with the path and says it was to be `what`.
std::string read_regular_file(const std::string& path, std::size_t max_bytes,
                              const std::string& what);
// The same checks and bound, with the bytes handed to `take` in order, a piece at a time (64 KiB
// at most), so that a large file is never held whole.
void read_regular_file_chunks(const std::string& path, std::size_t max_bytes,
                              const std::string& what,
                              const std::function<void(std::string_view)>& take);

// Parses a JSON file; throws Error(not_found / invalid_argument) naming the file on failure: a
// missing or unreadable file, not a regular file (read_regular_file), more than
// kMaxJsonFileBytes, bad JSON.
Json read_json_file(const std::string& path);
// Parses JSON text with the same checks as read_json_file (which reads the file and calls this):
// errors (invalid_argument) start with `where`; the same key twice in one object, and nesting
// deeper than kMaxJsonDepth, are refused.
Json parse_json_text(std::string_view text, const std::string& where);

// A value from an input, as an error quotes it: its JSON cut to 40 characters (shorten()).
std::string quote(const Json& v);

// How write_file_atomic makes a file durable.
struct AtomicWriteOptions {
  // fsync the file before the rename and its folder after it, so that after a crash or a power
  // loss the path holds the old bytes or the new ones, never a prefix (checkpoints need it;
  // reports can do without the two disk flushes).
  bool durable = false;
  unsigned mode = 0666;  // permission bits of a new file, less the umask (0600: owner only)
  // Called after the bytes are written (and synced) and before the rename; a test pauses here to
  // kill the process mid-write.
  std::function<void()> before_rename;
};

// Writes bytes to `path` through a temporary file in the same folder ("PATH.tmp.PID") and a
// rename. Any failure (cannot create, short write, disk full, fsync, rename) throws
// failed_precondition naming the path, and removes the temporary file; so does a path that
// names something other than a regular file (a folder, a device, a FIFO), which stays as it is.
void write_file_atomic(const std::string& path, std::string_view bytes,
                       const AtomicWriteOptions& options = {});

// A typed field of a JSON object. `where` names the object (file and JSON path) for errors:
// "config.json: /train/epochs: expected a positive integer, got "ten"".
class JsonReader {
 public:
  JsonReader(const Json& object, std::string where);

  bool has(const std::string& key) const;
  double number(const std::string& key) const;
  long long integer(const std::string& key) const;
  bool boolean(const std::string& key) const;
  std::string string(const std::string& key) const;
  const Json& at(const std::string& key) const;
  // Throws invalid_argument for every key not in `known`, so typos never pass silently.
  void reject_unknown(std::initializer_list<std::string_view> known) const;
  [[noreturn]] void fail_at(const std::string& key, const std::string& what) const;
  std::string path(const std::string& key) const;

 private:
  const Json& object_;
  std::string where_;
};

}  // namespace dpg
