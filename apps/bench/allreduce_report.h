// What `bench allreduce` makes of its rounds: the rows' medians over rounds, the ratios taken
// within each round (against a baseline, the TLS, hierarchical or masked run against the plain
// one, the loopback's share), and the table or JSON lines that print them.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/bench_row.h"

namespace dpg::app::bench_report {

using bench::AllreduceRow;

// The backend names dpgossip's own variants carry in their rows.
inline constexpr const char* kTlsBackend = "dpgossip+tls";
inline constexpr const char* kHierBackend = "dpgossip+hier";
inline constexpr const char* kSecAggBackend = "dpgossip+secagg";

// The backend name a baseline's rows carry ("mpi" runs as "openmpi").
std::string backend_of(const std::string& baseline);

// What the command ran, in the terms of its report.
struct Runs {
  int peers = 0;
  std::vector<long long> sizes;
  std::vector<std::string> backends;   // every backend with a row per size in every round
  std::vector<std::string> baselines;  // "gloo", "mpi"
  bool tls = false, hierarchical = false, secure_aggregation = false;
  std::vector<std::vector<AllreduceRow>> by_round;
  // One loopback stream's GB/s per round; empty unless every peer's links ran over TCP.
  std::vector<double> loopback;
};

// A ratio per round, and its median and range over rounds: dpgossip's bus bandwidth over a
// baseline's ("busbw/gloo", "busbw/mpi", "busbw/best": the better of those run), the TLS run's
// time over the plain one ("time tls/plain": what TLS costs; "time hier/flat" and
// "time secagg/plain" likewise), or the share of the loopback's throughput all peers' sends
// used ("sent/loopback").
struct Ratio {
  std::string label;  // its column
  std::string row;    // the backend whose rows it is printed on
  long long bytes = 0;
  std::vector<double> per_round;
  double median = 0, min = 0, max = 0;
};

// Each backend's row per size, its time the median over rounds; ok only if every round's was.
// Throws internal when a round lacks a row.
std::vector<AllreduceRow> merged_rows(const Runs& runs);

// Every ratio the runs allow, size by size.
std::vector<Ratio> ratios_of(const Runs& runs);

// The report on stdout: with `json`, one object per limit, row and ratio; else a line with the
// machine's limits and the table. `memcpy` is one core's copy bandwidth, GB/s.
void print_report(const Runs& runs, const std::vector<AllreduceRow>& rows,
                  const std::vector<Ratio>& ratios, double memcpy, bool json,
                  const std::string& transport);

}  // namespace dpg::app::bench_report
