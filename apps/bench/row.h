// Forwards to runtime/core/bench_row.h, where the benchmarks' row model lives now (tools/bench's
// baseline programs include it too, and tools/ never includes apps/). Only
// apps/bench/cmd_bench.cc still includes this path; the header goes with that include.
#pragma once

#include "runtime/core/bench_row.h"
