// Checks the subcommands make before they start work, so that a run fails at once with the
// reason, not after an epoch or with a bare std::bad_alloc: what the command is doing (for the
// one-line error main() prints), whether its output paths can be written, whether its model and
// batch fit in memory. docs/LIMITS.md lists the limits.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/core/train_config.h"

namespace dpg::app {

// What the running command is doing ("reading config.json", "training"), for main()'s message
// when an exception escapes. A mutable global of the executable, never of a library.
void set_activity(std::string what);
const std::string& activity();

// How an output reaches its path: appended to it (metrics), or written whole to a new file that
// is renamed into place (write_file_atomic: a trace), which a device or a FIFO cannot take.
enum class OutputKind { appended, replaced };

// Fails (failed_precondition, naming `flag` and the path) unless `path` can be created or
// appended to: its folder is created when missing and must be a writable folder; a replaced
// output must not name a device, FIFO or socket. "" passes.
void check_output_path(const std::string& path, const std::string& flag,
                       OutputKind kind = OutputKind::appended);

// Appends `text` to `path`; any failure (full disk, a file size limit, a path that cannot be
// opened) throws failed_precondition naming `what` and the path, and a regular file is cut back
// to its length before, so that no torn line is left for the next append to run into.
void append_checked(const std::string& path, const std::string& text, const std::string& what);

// The bytes a training process of this configuration needs beyond its process: the model's copies
// and the step's buffers (peer_memory.h's model_and_step_bytes, the launcher's figure) and the
// data. Saturates rather than overflowing.
std::uint64_t estimate_train_bytes(const TrainConfig& c, std::uint64_t features, std::uint64_t classes,
                                   std::uint64_t data_bytes, int world);

}  // namespace dpg::app

namespace dpg::data { struct Prepared; }

namespace dpg::app {

// The output paths of `dpgossip train` (--metrics, --trace), checked before anything starts.
void check_train_outputs(const TrainConfig& c);

// Refuses (with both figures) a model, batch and data that do not fit in the available memory.
void require_train_memory(const TrainConfig& c, const data::Prepared& d, int world);

}  // namespace dpg::app
