#include "runtime/train/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <thread>

#include "runtime/core/error.h"

namespace dpg::train {
namespace {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little,
              "the checkpoint format is little-endian and written as the host's bytes");

constexpr char kMagic[8] = {'D', 'P', 'G', 'C', 'K', 'P', 'T', '\0'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 24;
constexpr std::size_t kStepDigits = 12;

template <class T> void append(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

std::uint32_t crc32_of(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes the length as a uInt: feed it in pieces below 4 GiB.
  constexpr std::size_t kPiece = 1u << 30;
  for (std::size_t at = 0; at < bytes.size(); at += kPiece) {
    const std::size_t n = std::min(kPiece, bytes.size() - at);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), static_cast<uInt>(n));
  }
  return static_cast<std::uint32_t>(crc);
}

// Reads the payload's fields in order; every length is checked against what is left.
class Cursor {
 public:
  Cursor(std::string_view bytes, const std::string& where) : rest_(bytes), where_(where) {}
  template <class T> T take() {
    T v;
    std::memcpy(&v, take_bytes(sizeof v, "a length").data(), sizeof v);
    return v;
  }
  std::string_view take_bytes(std::uint64_t n, const char* what) {
    if (n > rest_.size()) {
      fail(Code::data_loss, where_ + ": " + what + " runs past the end of the file (" +
                                std::to_string(n) + " bytes, " + std::to_string(rest_.size()) +
                                " left): the file is damaged");
    }
    const std::string_view out = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return out;
  }
  bool done() const { return rest_.empty(); }

 private:
  std::string_view rest_;
  const std::string& where_;
};

// A checkpoint that is not a regular file (a FIFO, a folder, a device put in its place) is
// damage, as a corrupt one is: refused naming it, never blocked on or read without end.
std::string read_whole(const std::string& path) {
  try {
    return read_regular_file(path, std::numeric_limits<std::size_t>::max(), "a checkpoint");
  } catch (const Error& e) {
    if (e.code() == Code::invalid_argument) fail(Code::data_loss, e.what());
    throw;
  }
}

// DPGOSSIP_TEST_CHECKPOINT_PAUSE=STEP:SECONDS pauses the write of step STEP's checkpoint
// between its fsync and its rename, so that a test can kill the process there.
void pause_for_tests(long long step) {
  const char* env = std::getenv("DPGOSSIP_TEST_CHECKPOINT_PAUSE");
  if (env == nullptr) return;
  long long at = -1;
  double seconds = 0;
  if (std::sscanf(env, "%lld:%lf", &at, &seconds) != 2 || at != step) return;
  if (seconds > 0 && seconds < 600) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }
}

// "step-000000000120.ckpt" -> 120; nullopt for any other name.
std::optional<long long> step_of(const std::string& name) {
  const std::string pre = "step-", post = ".ckpt";
  if (name.size() != pre.size() + kStepDigits + post.size() || name.rfind(pre, 0) != 0 ||
      name.compare(name.size() - post.size(), post.size(), post) != 0) {
    return std::nullopt;
  }
  long long v = 0;
  const char* b = name.data() + pre.size();
  const auto r = std::from_chars(b, b + kStepDigits, v);
  if (r.ec != std::errc() || r.ptr != b + kStepDigits || v < 0) return std::nullopt;
  return v;
}

}  // namespace

void Checkpoint::put_bytes(const std::string& name, std::string_view bytes) {
  if (name == "meta") fail(Code::internal, "checkpoint: the section name \"meta\" is reserved");
  sections_[name] = std::string(bytes);
}

void Checkpoint::get_bytes(const std::string& name, char* out, std::size_t bytes) const {
  const auto it = sections_.find(name);
  if (it == sections_.end()) {
    fail(Code::data_loss, where + ": the checkpoint has no section \"" + name + "\"");
  }
  if (it->second.size() != bytes) {
    fail(Code::data_loss, where + ": section \"" + name + "\" holds " +
                              std::to_string(it->second.size()) + " bytes, this run expects " +
                              std::to_string(bytes) + " (another model or configuration?)");
  }
  std::memcpy(out, it->second.data(), bytes);
}

std::size_t Checkpoint::count_bytes(const std::string& name, std::size_t value_bytes) const {
  const auto it = sections_.find(name);
  if (it == sections_.end()) {
    fail(Code::data_loss, where + ": the checkpoint has no section \"" + name + "\"");
  }
  if (it->second.size() % value_bytes != 0) {
    fail(Code::data_loss, where + ": section \"" + name + "\" is not a whole number of values");
  }
  return it->second.size() / value_bytes;
}

std::string Checkpoint::encode() const {
  std::string payload;
  append<std::uint32_t>(payload, static_cast<std::uint32_t>(sections_.size() + 1));
  auto section = [&](const std::string& name, std::string_view bytes) {
    append<std::uint32_t>(payload, static_cast<std::uint32_t>(name.size()));
    payload += name;
    append<std::uint64_t>(payload, bytes.size());
    payload += bytes;
  };
  section("meta", meta.dump());
  for (const auto& [name, bytes] : sections_) section(name, bytes);
  std::string out(kMagic, sizeof kMagic);
  append<std::uint32_t>(out, kVersion);
  append<std::uint32_t>(out, crc32_of(payload));
  append<std::uint64_t>(out, payload.size());
  return out + payload;
}

Checkpoint Checkpoint::decode(std::string_view bytes, const std::string& where) {
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    fail(Code::data_loss, where + ": not a dpgossip checkpoint (no header; " +
                              std::to_string(bytes.size()) + " bytes)");
  }
  std::uint32_t version = 0, crc = 0;
  std::uint64_t length = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&crc, bytes.data() + 12, 4);
  std::memcpy(&length, bytes.data() + 16, 8);
  if (version != kVersion) {
    fail(Code::data_loss, where + ": checkpoint format version " + std::to_string(version) +
                              ", this build reads version " + std::to_string(kVersion));
  }
  const std::string_view payload = bytes.substr(kHeaderBytes);
  if (payload.size() != length) {
    fail(Code::data_loss, where + ": truncated or extended: the header says " +
                              std::to_string(length) + " bytes of payload, the file has " +
                              std::to_string(payload.size()));
  }
  if (crc32_of(payload) != crc) {
    fail(Code::data_loss, where + ": checksum mismatch: the file is corrupt");
  }
  Checkpoint c;
  c.where = where;
  Cursor cur(payload, where);
  const auto count = cur.take<std::uint32_t>();
  bool has_meta = false;
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::string name(cur.take_bytes(cur.take<std::uint32_t>(), "a section name"));
    const std::string_view data = cur.take_bytes(cur.take<std::uint64_t>(), "a section");
    if (name == "meta") {
      c.meta = parse_json_text(data, where + ": meta");
      has_meta = c.meta.is_object();
    } else if (!c.sections_.emplace(name, std::string(data)).second) {
      fail(Code::data_loss, where + ": section \"" + name + "\" appears twice");
    }
  }
  if (!cur.done()) fail(Code::data_loss, where + ": bytes after the last section");
  if (!has_meta) fail(Code::data_loss, where + ": no meta section");
  return c;
}

Json rng_to_json(const Rng::State& s) {
  return {{"s", {s.s[0], s.s[1], s.s[2], s.s[3]}},
          {"spare_normal", s.spare_normal},
          {"has_spare", s.has_spare}};
}

Rng::State rng_from_json(const Json& j, const std::string& where) {
  JsonReader r(j, where);
  const Json& s = r.at("s");
  if (!s.is_array() || s.size() != 4) r.fail_at("s", "expected 4 unsigned integers");
  Rng::State out{};
  for (std::size_t i = 0; i < 4; ++i) {
    if (!s[i].is_number_unsigned()) r.fail_at("s", "expected 4 unsigned integers");
    out.s[i] = s[i].get<std::uint64_t>();
  }
  out.spare_normal = r.number("spare_normal");
  out.has_spare = r.boolean("has_spare");
  return out;
}

CheckpointDir::CheckpointDir(std::string root, int rank, int keep)
    : folder_((fs::path(root) / ("rank-" + std::to_string(rank))).string()),
      rank_(rank),
      keep_(keep) {
  if (keep_ < 1) fail(Code::invalid_argument, "/checkpoint_keep: must be at least 1");
}

std::string CheckpointDir::path_of(long long step) const {
  std::string digits = std::to_string(step);
  digits.insert(0, kStepDigits > digits.size() ? kStepDigits - digits.size() : 0, '0');
  return (fs::path(folder_) / ("step-" + digits + ".ckpt")).string();
}

std::vector<long long> CheckpointDir::listed() const {
  std::vector<long long> out;
  std::error_code ec;
  if (!fs::is_directory(folder_, ec)) return out;
  for (const auto& e : fs::directory_iterator(folder_, ec)) {
    if (const auto s = step_of(e.path().filename().string())) out.push_back(*s);
  }
  if (ec) fail(Code::failed_precondition, folder_ + ": cannot list: " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

bool CheckpointDir::has_history() const {
  std::error_code ec;
  return !listed().empty() || fs::exists(fs::path(folder_) / "ledger.json", ec);
}

Checkpoint CheckpointDir::read(long long step) const {
  const std::string path = path_of(step);
  Checkpoint c = Checkpoint::decode(read_whole(path), path);
  const Json& m = c.meta;
  if (!m.contains("step") || m["step"] != step || !m.contains("rank") || m["rank"] != rank_) {
    fail(Code::data_loss, path + ": written for step " +
                              (m.contains("step") ? quote(m["step"]) : "?") + " of rank " +
                              (m.contains("rank") ? quote(m["rank"]) : "?") + ", not step " +
                              std::to_string(step) + " of rank " + std::to_string(rank_));
  }
  return c;
}

std::vector<long long> CheckpointDir::valid_steps(void (*warn)(const std::string&)) const {
  std::error_code ec;
  if (fs::is_directory(folder_, ec)) {
    for (const auto& e : fs::directory_iterator(folder_, ec)) {
      if (e.path().filename().string().find(".tmp.") != std::string::npos) {
        warn(e.path().string() + ": removing what an interrupted write left");
        fs::remove(e.path(), ec);
      }
    }
  }
  std::vector<long long> out;
  for (long long s : listed()) {
    try {
      read(s);
      out.push_back(s);
    } catch (const Error& e) {
      if (e.code() != Code::data_loss && e.code() != Code::not_found) throw;
      warn(std::string(e.what()) + "; skipping it");
    }
  }
  return out;
}

void CheckpointDir::write(long long step, const Checkpoint& c) const {
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec) fail(Code::failed_precondition, folder_ + ": cannot create: " + ec.message());
  write_file_atomic(path_of(step), c.encode(),
                    {.durable = true,
                     .mode = 0600,
                     .before_rename = [step] { pause_for_tests(step); }});
  const auto steps = listed();
  if (steps.size() <= static_cast<std::size_t>(keep_)) return;
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep_) < steps.size(); ++i) {
    if (!fs::remove(path_of(steps[i]), ec) && ec) {
      fail(Code::failed_precondition, path_of(steps[i]) + ": cannot remove: " + ec.message());
    }
  }
}

void CheckpointDir::remove_after(long long step) const {
  std::error_code ec;
  for (long long s : listed()) {
    if (s > step && !fs::remove(path_of(s), ec) && ec) {
      fail(Code::failed_precondition, path_of(s) + ": cannot remove: " + ec.message());
    }
  }
}

std::optional<Json> CheckpointDir::ledger() const {
  const std::string path = (fs::path(folder_) / "ledger.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  Json j = read_json_file(path);
  JsonReader r(j, path + ":");
  if (r.integer("reserved_until") < 0) r.fail_at("reserved_until", "must be non-negative");
  // Another peer's ledger (a folder copied or mixed up) would charge this peer for its steps.
  if (const long long owner = r.integer("rank"); owner != rank_) {
    r.fail_at("rank", "is " + std::to_string(owner) + ", but rank " + std::to_string(rank_) +
                          " reads this folder: each peer keeps its own ledger");
  }
  return j;
}

std::optional<long long> CheckpointDir::reserved() const {
  const auto j = ledger();
  if (!j) return std::nullopt;
  return j->at("reserved_until").get<long long>();
}

namespace {

void write_ledger(const std::string& folder, const Json& j) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) fail(Code::failed_precondition, folder + ": cannot create: " + ec.message());
  write_file_atomic((fs::path(folder) / "ledger.json").string(), j.dump() + "\n",
                    {.durable = true, .mode = 0600, .before_rename = {}});
}

}  // namespace

void CheckpointDir::reserve(long long until) const {
  write_ledger(folder_, {{"reserved_until", until}, {"rank", rank_}, {"run_id", run_id_}});
}

std::optional<std::string> CheckpointDir::ledger_run_id() const {
  const auto j = ledger();
  if (!j) return std::nullopt;
  JsonReader r(*j, (fs::path(folder_) / "ledger.json").string() + ":");
  return r.has("run_id") ? r.string("run_id") : std::string();
}

void CheckpointDir::mark_finished(const Finished& f) const {
  write_ledger(folder_, {{"reserved_until", f.step},
                         {"rank", rank_},
                         {"run_id", run_id_},
                         {"finished", {{"step", f.step},
                                       {"training_hash", f.training_hash},
                                       {"training", f.training},
                                       {"epsilon", f.epsilon}}}});
}

std::optional<CheckpointDir::Finished> CheckpointDir::finished() const {
  const auto j = ledger();
  if (!j || !j->contains("finished")) return std::nullopt;
  const std::string path = (fs::path(folder_) / "ledger.json").string();
  JsonReader r(JsonReader(*j, path + ":").at("finished"), path + ": /finished");
  Finished f{r.integer("step"), r.string("training_hash"), r.at("training"), r.number("epsilon")};
  if (f.step != j->at("reserved_until").get<long long>()) {
    r.fail_at("step", "is " + std::to_string(f.step) + ", not the ledger's reserved_until");
  }
  return f;
}

}  // namespace dpg::train
