// `dpgossip report RUN_DIR`: the report of a run made afterwards from its metrics file, the same
// page `train --report` writes (status_report.h), filled from the run's lines: its facts (the
// first line rank 0 writes, kind "facts"), its epoch and consensus lines, every peer's last live
// figures (kind "peers", with a status feed) and its summary. docs/STATUS.md, "The report".
#pragma once

#include <cstddef>
#include <string>

#include "apps/status_board.h"

namespace dpg::app {

// The most a metrics file may weigh for a report, and one line of it.
inline constexpr std::size_t kMaxReportMetricsBytes = std::size_t{1} << 30;
inline constexpr std::size_t kMaxReportLineBytes = std::size_t{64} << 20;

struct RunLines {
  std::string run;          // the run's name
  std::size_t lines = 0;    // of that run, from its facts line on
  bool ended = false;       // a summary or stopped line came
};

// Fills `board` with the lines of run `run` of the metrics file `path` ("" = the last run in the
// file with a facts line), from that run's last facts line on. Throws invalid_argument naming
// the file (and line) for a file that cannot be read, a line that is not JSON, a run not there,
// or a run without a facts line (written by dpgossip before reports from metrics files).
RunLines load_run(const std::string& path, const std::string& run, StatusBoard& board);

// `path` itself when it is a file; PATH/metrics.jsonl when it is a folder.
std::string metrics_file_of(const std::string& path);

}  // namespace dpg::app
