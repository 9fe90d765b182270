// `dpgossip train --trace FILE`: each peer streams its own part file (FILE.rankR.json, valid JSON
// after every flush, so a run that dies leaves readable parts for tools/merge_traces.py); at the
// end rank 0 gathers every part through the communicator and writes FILE, one Chrome trace with a
// process per peer, and the parts are removed.
#pragma once

#include <string>

#include "runtime/collective/communicator.h"
#include "runtime/core/trace.h"

namespace dpg::app {

std::string trace_part_path(const std::string& file, int rank);

// Opens this peer's part of FILE ("" = no trace: the tracer stays off).
void open_trace(trace::Tracer& tracer, const std::string& file, int rank);

// Closes every peer's part and writes FILE on rank 0 (atomically); collective when `comm` is set.
void finish_trace(trace::Tracer& tracer, collective::Communicator* comm, const std::string& file);

}  // namespace dpg::app
