// One peer's checkpoint file, and the folder of a peer's checkpoints (docs/RELIABILITY.md).
//
// A checkpoint is named sections of bytes, one of them the JSON "meta" (small values: the step,
// the config it was written under, the accountants, generator states). The file:
//
//   offset 0   "DPGCKPT\0"                  8 bytes
//          8   format version (u32, 1)
//         12   CRC-32 (zlib) of the payload (u32)
//         16   payload length in bytes (u64)
//         24   payload: section count (u32), then per section: name length (u32), name,
//              size (u64), bytes
//
// all little-endian. A file shorter or longer than its header says, with another checksum, or
// whose sections overrun the payload is refused as data_loss; nothing is allocated beyond the
// file's own size, whatever a length inside says. The checksum finds truncation and bit rot, not
// a deliberate forgery: a checkpoint is trusted input, kept where the run's owner keeps it.
//
// The folder of rank R is DIR/rank-R: step-<12 digits>.ckpt files, written through a temporary
// file, fsync, rename and an fsync of the folder (write_file_atomic, mode 0600), the newest
// `keep` kept; and ledger.json, the privacy ledger: the highest step this peer may have taken
// beyond its newest checkpoint (see Trainer, docs/RELIABILITY.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "runtime/core/json_io.h"
#include "runtime/core/rng.h"

namespace dpg::train {

class Checkpoint {
 public:
  Json meta = Json::object();

  // Section `name` holds `values` (floats, doubles, integers: their bytes).
  template <class T>
  void put(const std::string& name, std::span<const T> values) {
    static_assert(std::is_trivially_copyable_v<T>);
    put_bytes(name, std::string_view(reinterpret_cast<const char*>(values.data()),
                                     values.size_bytes()));
  }
  void put_bytes(const std::string& name, std::string_view bytes);
  bool has(const std::string& name) const { return sections_.count(name) > 0; }
  // Copies section `name` into `out`; throws data_loss naming the section when it is missing or
  // does not hold exactly out.size() values.
  template <class T>
  void get(const std::string& name, std::span<T> out) const {
    static_assert(std::is_trivially_copyable_v<T>);
    get_bytes(name, reinterpret_cast<char*>(out.data()), out.size_bytes());
  }
  // The number of values of type T in section `name` (data_loss unless a whole number).
  template <class T>
  std::size_t count(const std::string& name) const {
    return count_bytes(name, sizeof(T));
  }

  std::string encode() const;
  // Throws data_loss naming `where` for a file that is not a whole, intact checkpoint.
  static Checkpoint decode(std::string_view bytes, const std::string& where);

  std::string where;  // the file it was read from (for errors), "" when made here

 private:
  void get_bytes(const std::string& name, char* out, std::size_t bytes) const;
  std::size_t count_bytes(const std::string& name, std::size_t value_bytes) const;
  std::map<std::string, std::string> sections_;
};

// A generator's state in JSON, and back (errors name `where`).
Json rng_to_json(const Rng::State& s);
Rng::State rng_from_json(const Json& j, const std::string& where);

class CheckpointDir {
 public:
  // `root` is checkpoint_dir; the folder is created when first written.
  CheckpointDir(std::string root, int rank, int keep);

  const std::string& folder() const { return folder_; }
  std::string path_of(long long step) const;
  // Whether an earlier run left anything here (a checkpoint or a ledger).
  bool has_history() const;
  // The steps of the checkpoint files here, ascending, their contents not yet read.
  std::vector<long long> listed() const;
  // Reads and checks one: data_loss when it is not intact, or was written for another step or
  // rank.
  Checkpoint read(long long step) const;
  // The steps whose files read() accepts, ascending; a refused one is reported through `warn`
  // and skipped. Temporary files left by an interrupted write are removed.
  std::vector<long long> valid_steps(void (*warn)(const std::string&)) const;
  // Writes the checkpoint of `step` durably, then removes all but the newest `keep`. A failure
  // throws failed_precondition naming the file.
  void write(long long step, const Checkpoint& c) const;
  // Removes the checkpoints after `step` (those of a continuation abandoned by a resume).
  void remove_after(long long step) const;

  // The ledger: the highest step this peer may have reached; nullopt when there is none.
  std::optional<long long> reserved() const;
  void reserve(long long until) const;
  // The run id the ledger carries (RunIdentity::run_id; "" in a ledger without one); nullopt
  // when there is no ledger. Every later ledger write carries set_run_id()'s.
  std::optional<std::string> ledger_run_id() const;
  void set_run_id(std::string id) { run_id_ = std::move(id); }
  // A run that took all its steps says so in its ledger, with what identifies it (its training
  // settings' hash) and the epsilon it reported, so that a --resume of it trains nothing.
  struct Finished {
    long long step = 0;
    std::string training_hash;
    Json training;  // the settings themselves (training_settings()), to name what differs
    double epsilon = 0;
  };
  void mark_finished(const Finished& f) const;
  std::optional<Finished> finished() const;

 private:
  // The ledger, its reserved_until and rank checked (throws naming the file); nullopt: none.
  std::optional<Json> ledger() const;

  std::string folder_;
  int rank_;
  int keep_;
  std::string run_id_;
};

}  // namespace dpg::train
