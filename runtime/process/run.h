// Running one child to its end with a deadline: the benchmarks' baselines (Gloo, OpenMPI,
// PyTorch), whose rows come back on their stdout.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "runtime/process/process.h"

namespace dpg::proc {

struct RunOptions {
  // Each stream: capture (kept in RunResult), prefixed (to this process's own stream of the same
  // kind), inherit, null or file.
  Stdio out = Stdio::capture();
  Stdio err = Stdio::inherit();
  // The most a captured stream may print: a result is rows, never megabytes, so more means
  // something is wrong, and the child is stopped rather than let fill memory.
  size_t capture_limit_bytes = 16u << 20;
  // From the start to the exit; past it the child is stopped (SIGTERM, SIGKILL `grace` later).
  std::chrono::milliseconds timeout{60000};
  std::chrono::milliseconds grace{5000};
  // After the exit, how long pipes that its own children still hold open are read; what they
  // print later is dropped.
  std::chrono::milliseconds drain{1000};
  std::string what;  // names the child in messages; argv[0] when empty
};

struct RunResult {
  int status = 0;       // the wait status (describe_status, succeeded, exit_code)
  std::string out, err;  // the captured streams
  std::chrono::milliseconds elapsed{0};
};

// Starts `command`, feeds its output where `options` say, and waits for its exit. Returns
// whatever the exit status. Throws dpg::Error: spawn's errors; deadline_exceeded when the
// timeout passed (the child stopped first, and the message says how it ended); out_of_range when
// a captured stream passed capture_limit_bytes (the child stopped first).
RunResult run(const Command& command, const RunOptions& options);

}  // namespace dpg::proc
