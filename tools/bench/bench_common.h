// What the Gloo and OpenMPI baseline programs share: the command line, the inputs and their
// closed-form check. These are standalone tools: they print and exit. Their rows, the repeat
// counts and the row arithmetic are dpgossip's own (runtime/core/bench_row.h, a header of the
// standard library only), so the rows compare by construction with those of `dpgossip bench
// allreduce`, which reads them back; the Gloo program also starts and supervises its ranks with dpgossip's
// process library (runtime/process).
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/core/bench_row.h"

namespace dpg_bench {

struct Args {
  int peers = 4;
  std::vector<long long> sizes_bytes;
  int warmup = 3;
  int repeats = 100;    // at sizes up to kFullRepeatBytes; fewer above (dpg::bench::repeats_for_size)
  double timeout_s = 240;  // whole run (Gloo's launcher only)
  bool pin = false;        // pin rank r to CPU r mod the CPU count (Gloo's launcher only)
  // Gloo only, given by its launcher to each rank it starts (a copy of the same program): which
  // rank this process is, and the rendezvous folder. -1 / empty: this process is the launcher.
  int rank = -1;
  std::string store;
};

constexpr int kMaxPeers = 64;  // keeps every partial sum of the check values below 2^24
// The element count must fit an int (MPI_Allreduce's count).
constexpr long long kMaxBytes = 4LL * 0x7fffffffLL;
constexpr const char* kDefaultSizes = "4K,64K,1M,16M,64M";

inline void usage(const char* prog, bool with_peers) {
  std::fprintf(stderr,
               "usage: %s%s [--sizes LIST] [--warmup W] [--repeats R]%s\n"
               "  --sizes    bytes per all-reduce, K/M/G = KiB/MiB/GiB, multiples of 4\n"
               "             (default %s)\n"
               "  --warmup   untimed all-reduces per size, fewer above 4 MiB as for\n"
               "             --repeats (default 3)\n"
               "  --repeats  timed all-reduces per size up to 4 MiB; larger sizes run\n"
               "             R * 4 MiB / bytes of them, at least min(R, 5) (default 100)\n"
               "%s"
               "Prints one JSON object per size on stdout (rank 0); exit status 0 only if every\n"
               "rank's result matched the closed form.\n",
               prog, with_peers ? " [--peers N]" : "", with_peers ? " [--timeout S] [--pin 0|1]" : "",
               kDefaultSizes,
               with_peers ? "  --peers    processes to fork (default 4)\n"
                            "  --timeout  seconds for the whole run before the ranks are killed\n"
                            "             (default 240)\n"
                            "  --pin      1: pin rank r to CPU r mod the CPU count (default 0)\n"
                            "  (--rank R --store DIR: set by the launcher for each rank it starts)\n"
                          : "");
}

// "4K" -> 4096, "1M" -> 1048576, "100" -> 100; -1 when malformed.
inline long long parse_size(const std::string& text) {
  if (text.empty()) return -1;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || value <= 0) return -1;
  long long scale = 1;
  const std::string suffix(end);
  if (suffix == "K" || suffix == "k") scale = 1LL << 10;
  else if (suffix == "M" || suffix == "m") scale = 1LL << 20;
  else if (suffix == "G" || suffix == "g") scale = 1LL << 30;
  else if (!suffix.empty()) return -1;
  if (value > kMaxBytes / scale) return -1;
  return value * scale;
}

inline bool parse_sizes(const std::string& text, std::vector<long long>& out) {
  out.clear();
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const long long bytes = parse_size(text.substr(start, comma - start));
    if (bytes <= 0 || bytes % 4 != 0) return false;
    out.push_back(bytes);
    start = comma + 1;
  }
  return !out.empty();
}

inline bool parse_int(const char* text, int lo, int hi, int& out) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) return false;
  out = static_cast<int>(v);
  return true;
}

// Returns 0 when parsed, 1 after --help, 2 after an error (both already printed).
inline int parse_args(int argc, char** argv, bool with_peers, Args& a) {
  parse_sizes(kDefaultSizes, a.sizes_bytes);
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      usage(argv[0], with_peers);
      return 1;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value\n", argv[0], flag.c_str());
      return 2;
    }
    const char* value = argv[++i];
    bool ok = false;
    if (flag == "--sizes") {
      ok = parse_sizes(value, a.sizes_bytes);
    } else if (flag == "--warmup") {
      ok = parse_int(value, 0, 1000000, a.warmup);
    } else if (flag == "--repeats") {
      ok = parse_int(value, 1, 1000000, a.repeats);
    } else if (with_peers && flag == "--peers") {
      ok = parse_int(value, 1, kMaxPeers, a.peers);
    } else if (with_peers && flag == "--timeout") {
      int t = 0;
      ok = parse_int(value, 1, 86400, t);
      a.timeout_s = t;
    } else if (with_peers && flag == "--rank") {
      ok = parse_int(value, 0, kMaxPeers - 1, a.rank);
    } else if (with_peers && flag == "--store") {
      a.store = value;
      ok = !a.store.empty();
    } else if (with_peers && flag == "--pin") {
      int pin = 0;
      ok = parse_int(value, 0, 1, pin);
      a.pin = pin == 1;
    } else {
      std::fprintf(stderr, "%s: unknown flag %s%s\n", argv[0], flag.c_str(),
                   flag == "--peers" ? " (the number of ranks is mpirun's -np)" : "");
      usage(argv[0], with_peers);
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "%s: bad value for %s: \"%s\"%s\n", argv[0], flag.c_str(), value,
                   flag == "--sizes" ? " (positive multiples of 4 bytes, K/M/G suffixes)" : "");
      return 2;
    }
  }
  return 0;
}

// input[i] = (rank + 1) * (1 + i % 13), so the sum over n ranks is n(n+1)/2 * (1 + i % 13):
// integers below 2^24, exact in float32 in any order of addition, and different per element so
// that a chunk put in the wrong place shows.
inline void fill_input(std::vector<float>& in, int rank) {
  for (std::size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<float>((rank + 1) * (1 + static_cast<int>(i % 13)));
  }
}

// Number of wrong elements; the first one is described on stderr.
inline long long count_mismatches(const std::vector<float>& out, int peers, int rank,
                                  long long bytes, const char* backend) {
  long long bad = 0;
  const long long tri = static_cast<long long>(peers) * (peers + 1) / 2;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const float expected = static_cast<float>(tri * (1 + static_cast<long long>(i % 13)));
    if (out[i] != expected) {
      if (bad == 0) {
        std::fprintf(stderr, "%s rank %d: %lld bytes: element %zu = %.9g, expected %.9g\n", backend,
                     rank, bytes, i, static_cast<double>(out[i]), static_cast<double>(expected));
      }
      ++bad;
    }
  }
  return bad;
}

// Prints rank 0's row of one size (runtime/core/bench_row.h) on stdout, flushed at once.
inline void print_row(const char* backend, int peers, long long bytes,
                      const std::vector<double>& times_us, bool ok) {
  dpg::bench::AllreduceRow row = dpg::bench::make_row(backend, peers, bytes, times_us);
  row.ok = ok;
  std::printf("%s\n", dpg::bench::to_json_line(row).c_str());
  std::fflush(stdout);
}

}  // namespace dpg_bench
