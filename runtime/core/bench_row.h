// The rows benchmarks print, one JSON object per line, and the arithmetic behind them: the one
// row model of dpgossip's `bench` commands and of the baseline programs they run beside their own
// code (tools/bench/gloo_allreduce.cc, tools/bench/mpi_allreduce.cc include this header;
// tools/bench_torch_mlp.py prints StepRow's keys). The baselines do not link dpgossip's
// libraries, so this header needs nothing but the standard library. Reading rows back is
// apps/bench/row_json.h.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace dpg::bench {

// One all-reduce size on one backend.
// {"backend":"gloo","peers":4,"bytes":4096,"time_us":41.5,"algbw_GBps":0.0987,
//  "busbw_GBps":0.148,"repeats":100,"ok":true}
struct AllreduceRow {
  std::string backend;     // "dpgossip", "gloo", "openmpi"
  int peers = 0;
  long long bytes = 0;     // float32 payload of one all-reduce
  double time_us = 0;      // median wall time of one all-reduce on rank 0
  double algbw_GBps = 0;   // bytes / time
  double busbw_GBps = 0;   // algbw * 2(N-1)/N
  int repeats = 0;         // timed operations behind the median
  bool ok = false;         // every rank's result matched the closed form
};

// One training-step configuration on one backend.
// {"backend":"torch","device":"cpu","mode":"sgd","threads":1,"batch":256,
//  "samples_per_second":51234.5}
struct StepRow {
  std::string backend;  // "dpgossip", "torch"
  std::string device;   // where the step's arithmetic ran: "cpu", or "cuda:N" (GPU N)
  std::string mode;     // "sgd" (no privacy) or "dpsgd"
  int threads = 0;      // BLAS threads (CPU threads); on a GPU they bound only the host side
  int batch = 0;
  double samples_per_second = 0;  // median over the timed windows
};

// The keys of each row, in the order they are printed; a reader accepts exactly these.
inline const std::vector<std::string>& allreduce_keys() {
  static const std::vector<std::string> keys = {"backend",    "peers",      "bytes",   "time_us",
                                                "algbw_GBps", "busbw_GBps", "repeats", "ok"};
  return keys;
}
inline const std::vector<std::string>& step_keys() {
  static const std::vector<std::string> keys = {"backend", "device", "mode", "threads", "batch",
                                                "samples_per_second"};
  return keys;
}

// The middle value (the mean of the two middle ones for an even count); 0 when empty.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t m = values.size() / 2;
  return values.size() % 2 == 1 ? values[m] : 0.5 * (values[m - 1] + values[m]);
}

// The row of `times_us`, one per timed operation: their median, algbw = bytes / time, and
// busbw = algbw * 2(N-1)/N, the factor of a bandwidth-optimal all-reduce (NCCL-tests'
// convention), 0 for N = 1 since no byte crosses a link. ok = true, repeats = times_us.size().
inline AllreduceRow make_row(std::string backend, int peers, long long bytes,
                             const std::vector<double>& times_us) {
  AllreduceRow r;
  r.backend = std::move(backend);
  r.peers = peers;
  r.bytes = bytes;
  r.time_us = median(times_us);
  r.algbw_GBps = r.time_us > 0 ? static_cast<double>(bytes) / r.time_us / 1e3 : 0.0;  // B/us->GB/s
  r.busbw_GBps = peers > 1 ? r.algbw_GBps * 2.0 * (peers - 1) / peers : 0.0;
  r.repeats = static_cast<int>(times_us.size());
  r.ok = true;
  return r;
}

// Timed (and warm-up) operations for one size, alike on every backend: all of `repeats` up to
// 4 MiB, repeats * 4 MiB / bytes above, at least min(repeats, 5), at least 1.
inline int repeats_for_size(long long bytes, int repeats) {
  constexpr long long kFullRepeatBytes = 4LL << 20;
  if (bytes <= 0) return std::max(repeats, 1);
  const long long scaled = static_cast<long long>(repeats) * kFullRepeatBytes / bytes;
  return static_cast<int>(
      std::clamp<long long>(scaled, std::min(repeats, 5), std::max(repeats, 1)));
}

namespace detail {
// A JSON string of a plain name (backend, device, mode); other bytes are escaped as \u00XX.
inline std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const unsigned char c : s) {
    if (c < 0x20 || c == '"' || c == '\\' || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}
// Nine significant digits: every figure a timer gives, in plain JSON (times are finite).
inline std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}
}  // namespace detail

// The row as one line of JSON, without the newline.
inline std::string to_json_line(const AllreduceRow& r) {
  const auto& k = allreduce_keys();
  return "{\"" + k[0] + "\":" + detail::quoted(r.backend) + ",\"" + k[1] + "\":" +
         std::to_string(r.peers) + ",\"" + k[2] + "\":" + std::to_string(r.bytes) + ",\"" + k[3] +
         "\":" + detail::number(r.time_us) + ",\"" + k[4] + "\":" + detail::number(r.algbw_GBps) +
         ",\"" + k[5] + "\":" + detail::number(r.busbw_GBps) + ",\"" + k[6] + "\":" +
         std::to_string(r.repeats) + ",\"" + k[7] + "\":" + (r.ok ? "true" : "false") + "}";
}

inline std::string to_json_line(const StepRow& r) {
  const auto& k = step_keys();
  return "{\"" + k[0] + "\":" + detail::quoted(r.backend) + ",\"" + k[1] + "\":" +
         detail::quoted(r.device) + ",\"" + k[2] + "\":" + detail::quoted(r.mode) + ",\"" +
         k[3] + "\":" + std::to_string(r.threads) + ",\"" + k[4] + "\":" +
         std::to_string(r.batch) + ",\"" + k[5] + "\":" + detail::number(r.samples_per_second) +
         "}";
}

}  // namespace dpg::bench
