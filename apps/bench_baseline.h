// All-reduce rows shared by dpgossip's own ring and the baselines that `dpgossip bench allreduce
// --baseline gloo|mpi` runs beside it: Gloo's ring (tools/bench/gloo_allreduce.cc) and OpenMPI's
// MPI_Allreduce (tools/bench/mpi_allreduce.cc), each a separate program printing one JSON row per
// size. Rows from both sides are made by the same arithmetic (make_row), so they compare.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/json_io.h"

namespace dpg::app {

struct AllreduceRow {
  std::string backend;  // "dpgossip", "gloo", "openmpi"
  int peers = 0;
  long long bytes = 0;      // float32 payload of one all-reduce
  double time_us = 0;       // median wall time of one all-reduce on rank 0
  double algbw_GBps = 0;    // bytes / time
  double busbw_GBps = 0;    // algbw * 2(N-1)/N
  int repeats = 0;          // timed operations behind the median
  bool ok = false;          // every rank's result matched the closed form
};

// The middle value (the mean of the two middle ones for an even count); 0 when empty. The one
// median of the bench commands.
double median(std::vector<double> values);

// {"backend":...,"peers":...,"bytes":...,"time_us":...,"algbw_GBps":...,"busbw_GBps":...,
//  "repeats":...,"ok":...}: the line the baseline programs print.
Json to_json(const AllreduceRow& row);

// The inverse of to_json; every field is required and no other is allowed. Errors
// (invalid_argument) name `where` and the field.
AllreduceRow row_from_json(const Json& j, const std::string& where);

// Median of the per-op times in microseconds (the mean of the middle two for an even count) ->
// a row with algbw and busbw filled, ok = true and repeats = times_us.size().
// busbw = algbw * 2(N-1)/N, the factor of a bandwidth-optimal all-reduce (NCCL-tests' convention);
// for N = 1 it is 0: no byte crosses a link. Throws invalid_argument for an empty `times_us`,
// peers < 1 or bytes < 0.
AllreduceRow make_row(std::string backend, int peers, long long bytes,
                      std::vector<double> times_us);

// Timed operations per size for a requested count, as the baseline programs count them: all of
// `repeats_hint` up to 4 MiB, repeats_hint * 4 MiB / bytes above, at least min(repeats_hint, 5).
// dpgossip's own side can use it to time as many operations as the baselines do.
int repeats_for_size(long long bytes, int repeats_hint);

// Runs the named baseline ("gloo" or "mpi") on `peers` processes on 127.0.0.1 with the given sizes
// (bytes, positive multiples of 4), `warmup` untimed and repeats_for_size(bytes, repeats_hint)
// timed all-reduces per size, and returns its rows in the order of `sizes_bytes`.
// The program is looked for beside the running dpgossip (the directory of /proc/self/exe), then
// in ../tools/bench/ relative to that directory (the build tree), then on PATH; "mpi" also needs
// mpirun on PATH. The whole run is bounded (300 s): past it the started process gets SIGTERM, then
// SIGKILL, and deadline_exceeded is thrown. Errors are dpg::Error: failed_precondition when a
// program is missing (naming the Debian package that provides it) or the baseline fails,
// invalid_argument for bad arguments, internal when its output does not parse. With `pin`, rank r
// runs on CPU r mod the CPU count (Gloo's launcher pins; mpirun binds to cores), as dpgossip's
// own peers do under --pin. With `shared_memory`, OpenMPI runs over its shared-memory transport
// (`--mca btl self,vader`) instead of TCP; Gloo has only TCP.
std::vector<AllreduceRow> run_baseline(const std::string& name, int peers,
                                       const std::vector<long long>& sizes_bytes, int warmup,
                                       int repeats_hint, bool pin = false,
                                       bool shared_memory = false);

}  // namespace dpg::app
