// The report of a run (`train --report FILE.html`; docs/STATUS.md): the status page with the
// run's final status and its environment inside, one self-contained file to share.
#pragma once

#include <string>

#include "apps/status_board.h"
#include "runtime/core/json_io.h"

namespace dpg::app {

// Where the run ran: dpgossip's commit, the host name, the OS, the CPU, cores, memory, and the
// time (UTC) this was asked ("written").
Json run_environment();

// The page (status_html()) with `status` (StatusBoard::status()) and `environment` inside, drawn
// once when opened, no server needed.
std::string status_report_html(const Json& status, const Json& environment);

// Writes the report of `board` to `path` atomically; a failure throws naming the path. Its
// environment is the run's (its facts', from the start), "written" now.
void write_status_report(const std::string& path, const StatusBoard& board);

}  // namespace dpg::app
