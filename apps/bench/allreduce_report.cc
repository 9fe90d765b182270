#include "apps/bench/allreduce_report.h"

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <tuple>

#include "runtime/core/error.h"
#include "runtime/core/json_io.h"

namespace dpg::app::bench_report {
namespace {

using bench::median;

const AllreduceRow* find_row(const std::vector<AllreduceRow>& rows, const std::string& backend,
                             long long bytes) {
  for (const auto& r : rows) {
    if (r.backend == backend && r.bytes == bytes) return &r;
  }
  return nullptr;
}

// The row every round must have (merged_rows has checked that they do).
const AllreduceRow& row_of(const std::vector<AllreduceRow>& round, const std::string& backend,
                           long long bytes) {
  const AllreduceRow* r = find_row(round, backend, bytes);
  if (!r) fail(Code::internal, backend + " gave no row for " + std::to_string(bytes) + " bytes");
  return *r;
}

void summarise(Ratio& q) {
  q.median = median(q.per_round);
  const auto [lo, hi] = std::minmax_element(q.per_round.begin(), q.per_round.end());
  q.min = *lo;
  q.max = *hi;
}

std::string ratio_text(const Ratio& r) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2) << r.median;
  if (r.per_round.size() > 1) os << " (" << r.min << "-" << r.max << ")";
  return os.str();
}

// The baselines dpgossip's bus bandwidth is set against: each one run, and the better of them
// when there are two.
std::vector<std::string> compared(const Runs& runs) {
  std::vector<std::string> over = runs.baselines;
  if (runs.baselines.size() > 1) over.push_back("best");
  return over;
}

void print_table(const std::vector<AllreduceRow>& rows, const std::vector<Ratio>& ratios,
                 const std::vector<std::string>& columns) {
  std::cout << std::left << std::setw(16) << "backend" << std::right << std::setw(6) << "peers"
            << std::setw(12) << "bytes" << std::setw(12) << "time_us" << std::setw(12)
            << "algbw_GB/s" << std::setw(12) << "busbw_GB/s" << std::setw(6) << "ok";
  for (const auto& c : columns) std::cout << std::setw(22) << c;
  std::cout << "\n" << std::fixed;
  for (const auto& r : rows) {
    std::cout << std::left << std::setw(16) << r.backend << std::right << std::setw(6) << r.peers
              << std::setw(12) << r.bytes << std::setw(12) << std::setprecision(1) << r.time_us
              << std::setw(12) << std::setprecision(3) << r.algbw_GBps << std::setw(12)
              << r.busbw_GBps << std::setw(6) << (r.ok ? "yes" : "NO");
    for (const auto& c : columns) {
      std::string cell;
      for (const auto& q : ratios) {
        if (q.label == c && q.row == r.backend && q.bytes == r.bytes) cell = ratio_text(q);
      }
      std::cout << std::setw(22) << cell;
    }
    std::cout << "\n";
  }
}

// The ratio columns, in print order.
std::vector<std::string> columns_of(const Runs& runs) {
  std::vector<std::string> columns;
  for (const auto& b : compared(runs)) columns.push_back("busbw/" + b);
  if (runs.tls) columns.push_back("time tls/plain");
  if (runs.hierarchical) columns.push_back("time hier/flat");
  if (runs.secure_aggregation) columns.push_back("time secagg/plain");
  if (!runs.loopback.empty()) columns.push_back("sent/loopback");
  return columns;
}

}  // namespace

std::string backend_of(const std::string& baseline) {
  return baseline == "mpi" ? "openmpi" : baseline;
}

std::vector<AllreduceRow> merged_rows(const Runs& runs) {
  std::vector<AllreduceRow> rows;
  for (const auto& backend : runs.backends) {
    for (long long bytes : runs.sizes) {
      std::vector<double> times;
      int repeats = 0;
      bool ok = true;
      for (const auto& round : runs.by_round) {
        const AllreduceRow& r = row_of(round, backend, bytes);
        times.push_back(r.time_us);
        repeats += r.repeats;
        ok = ok && r.ok;
      }
      AllreduceRow row = bench::make_row(backend, runs.peers, bytes, times);
      row.repeats = repeats;
      row.ok = ok;
      rows.push_back(row);
    }
  }
  return rows;
}

std::vector<Ratio> ratios_of(const Runs& runs) {
  std::vector<Ratio> ratios;
  auto add = [&](Ratio q) {
    summarise(q);
    ratios.push_back(std::move(q));
  };
  for (long long bytes : runs.sizes) {
    for (const auto& b : compared(runs)) {
      Ratio q{"busbw/" + b, "dpgossip", bytes, {}};
      for (const auto& round : runs.by_round) {
        double theirs = 0;
        for (const auto& base : runs.baselines) {
          if (b != "best" && b != base) continue;
          theirs = std::max(theirs, row_of(round, backend_of(base), bytes).busbw_GBps);
        }
        const double mine = row_of(round, "dpgossip", bytes).busbw_GBps;
        q.per_round.push_back(theirs > 0 ? mine / theirs : 0.0);
      }
      add(std::move(q));
    }
    if (!runs.loopback.empty()) {
      // Round by round: every peer sends busbw (the ring's bytes per peer and second), N peers
      // at once, over what one stream carries.
      Ratio q{"sent/loopback", "dpgossip", bytes, {}};
      for (std::size_t i = 0; i < runs.by_round.size(); ++i) {
        q.per_round.push_back(runs.peers * row_of(runs.by_round[i], "dpgossip", bytes).busbw_GBps /
                              runs.loopback[i]);
      }
      add(std::move(q));
    }
    for (const auto& [on, label, backend] :
         {std::tuple{runs.tls, "time tls/plain", kTlsBackend},
          std::tuple{runs.hierarchical, "time hier/flat", kHierBackend},
          std::tuple{runs.secure_aggregation, "time secagg/plain", kSecAggBackend}}) {
      if (!on) continue;
      Ratio q{label, backend, bytes, {}};
      for (const auto& round : runs.by_round) {
        const double plain = row_of(round, "dpgossip", bytes).time_us;
        q.per_round.push_back(plain > 0 ? row_of(round, backend, bytes).time_us / plain : 0.0);
      }
      add(std::move(q));
    }
  }
  return ratios;
}

void print_report(const Runs& runs, const std::vector<AllreduceRow>& rows,
                  const std::vector<Ratio>& ratios, double memcpy, bool json,
                  const std::string& transport) {
  const bool over_tcp = !runs.loopback.empty();
  if (json) {
    std::cout << Json{{"limit", "memcpy_one_core"}, {"GBps", memcpy}}.dump() << "\n";
    if (over_tcp) {
      std::cout << Json{{"limit", "tcp_loopback_stream"}, {"GBps", median(runs.loopback)}}.dump()
                << "\n";
    }
    for (const auto& r : rows) std::cout << bench::to_json_line(r) << "\n";
    for (const auto& q : ratios) {
      std::cout << Json{{"ratio", q.label}, {"bytes", q.bytes}, {"median", q.median},
                        {"min", q.min}, {"max", q.max}, {"rounds", q.per_round.size()}}.dump()
                << "\n";
    }
    return;
  }
  std::cout << "transport " << transport << "; the machine's limit: one core copies "
            << std::fixed << std::setprecision(2) << memcpy << " GB/s (memcpy of 64 MiB)";
  if (over_tcp) {
    std::cout << "; TCP over loopback carries " << median(runs.loopback)
              << " GB/s (one connection, one way, 4 MiB writes)";
  }
  std::cout << "\n";
  print_table(rows, ratios, columns_of(runs));
}

}  // namespace dpg::app::bench_report
