// OpenBLAS opened at its first use (dynlib.h), not linked: a process that multiplies no matrices
// (the launcher, a benchmark of the collectives; a peer whose GEMMs run in oneDNN opens it only
// to analyse a graph, through LAPACKE) then neither maps nor relocates it, and does not start its thread pool, whose workers spin on
// sched_yield for a while after the library loads: on a machine with fewer cores than starting
// peers that spinning was the largest part of a peer's start-up (docs/BENCHMARKS.md, "Start-up").
#pragma once

#include <cblas.h>

namespace dpg {

// The OpenBLAS functions dpgossip calls.
struct OpenBlas {
  decltype(&cblas_sgemm) sgemm;
  decltype(&cblas_dgemm) dgemm;
  decltype(&openblas_set_num_threads) set_num_threads;
  decltype(&openblas_get_num_threads) get_num_threads;
};

// The library, opened once for the process (thread-safe), with the thread count of the last
// set_openblas_threads() before it. Throws unavailable (open_library) when it cannot be loaded
// or lacks a function.
const OpenBlas& openblas();

// OpenBLAS's thread count for the process: applied now where the library is open, else when it
// is opened (so that setting it does not load it). Returns the count the library runs at, or
// `threads` when it is not open yet.
int set_openblas_threads(int threads);

// The count last set, or where none was, OpenBLAS's own (which opens it).
int openblas_threads();

}  // namespace dpg
