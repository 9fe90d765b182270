// Forwards to runtime/process/find.h, where the process supervisor lives now. Only
// apps/bench/cmd_bench.cc still includes this path; the header goes with that include.
#pragma once

#include "runtime/process/find.h"
