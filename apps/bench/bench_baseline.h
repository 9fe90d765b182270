// The baselines `dpgossip bench allreduce --baseline gloo|mpi` runs beside dpgossip's own ring:
// Gloo's ring (tools/bench/gloo_allreduce.cc) and OpenMPI's MPI_Allreduce
// (tools/bench/mpi_allreduce.cc), each a separate program printing one row
// (runtime/core/bench_row.h) per size on its stdout.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/bench_row.h"

namespace dpg::app {

// Runs the named baseline ("gloo" or "mpi") on `peers` processes on 127.0.0.1 with the given sizes
// (bytes, positive multiples of 4), `warmup` untimed and repeats_for_size(bytes, repeats_hint)
// timed all-reduces per size, and returns its rows in the order of `sizes_bytes`.
// The program is looked for beside the running dpgossip, then in ../tools/bench/ relative to it
// (the build tree), then on PATH (proc::find_program); "mpi" also needs mpirun on PATH. The whole
// run is bounded (300 s): past it the started process gets SIGTERM, then SIGKILL, and
// deadline_exceeded is thrown. Errors are dpg::Error: failed_precondition when a program is
// missing (naming the Debian package that provides it) or the baseline fails, invalid_argument
// for bad arguments, data_loss when its output is not the rows asked for. With `pin`, rank r
// runs on CPU r mod the CPU count (Gloo's launcher pins; mpirun binds to cores), as dpgossip's
// own peers do under --pin. With `shared_memory`, OpenMPI runs over its shared-memory transport
// (`--mca btl self,vader`) instead of TCP; Gloo has only TCP.
// The command that starts the named baseline's `peers` ranks (the program, or mpirun and the
// program), before its own flags (--sizes, --warmup, --repeats); found and refused as above.
std::vector<std::string> baseline_command(const std::string& name, int peers, bool pin,
                                          bool shared_memory);

std::vector<bench::AllreduceRow> run_baseline(const std::string& name, int peers,
                                              const std::vector<long long>& sizes_bytes,
                                              int warmup, int repeats_hint, bool pin = false,
                                              bool shared_memory = false);

}  // namespace dpg::app
