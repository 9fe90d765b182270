// The options of `dpgossip bench step` and `bench allreduce`: each one a member below (its type
// and default) and one row of its command's table in bench_options.cc (flag, help, rule), from
// which the flags and the checks are generated (apps/option_table.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/collective/communicator.h"
#include "runtime/net/shm/shm_transport.h"

namespace dpg::app {

struct StepBenchOptions {
  std::string widths = "784,256,256,10";
  std::string activation = "relu";
  std::string threads = "1,2";
  int batch = 256;
  double seconds = 1.0;
  int repeats = 5;
  int rounds = 3;
  std::string baseline;  // "" or "torch"
  std::string torch_script = "tools/bench_torch_mlp.py";
  std::string python = "/usr/bin/python3";
  bool json = false;
  bool secure_noise = false;  // also time the DP step with --secure-noise's generator
  std::string device = "cpu";  // cpu, or cuda / cuda:N: the step on the CUDA backend
};

struct AllreduceBenchOptions {
  int peers = 4;
  std::string sizes = "4K,64K,1M,16M,64M";
  int warmup = 1000;
  int repeats = 500;
  std::string baseline;  // "", "gloo", "mpi" or "gloo,mpi"
  bool json = false;
  int rounds = 3;
  std::size_t segment_bytes = 256 * 1024;
  std::size_t small_bytes = collective::Options{}.small_bytes;
  std::size_t scratch_slots = collective::Options{}.scratch_slots;
  std::size_t medium_bytes = collective::Options{}.medium_bytes;
  int socket_buffer_bytes = 0;
  int spin_us = 50;
  double timeout_s = 60;
  std::string hosts;        // one peer of a multi-process run
  std::optional<int> rank;
  std::string rows_out;     // where rank 0 writes its rows (JSON lines); stdout when empty
  bool pin = false;         // pin peer r to CPU r mod (CPUs)
  bool progress_thread = false;  // an I/O thread per peer instead of I/O on the waiting thread
  bool tls = false;  // --peers: also over TLS, beside plain TCP; --hosts: TLS with its files
  // --peers: also the hierarchical all-reduce beside the flat one; --hosts: it alone.
  bool hierarchical = false;
  // Also the masked secure-aggregation exchange (dp/secagg.h) beside the plain all-reduce, in the
  // same peers, alternating with it.
  bool secure_aggregation = false;
  int emulated_hosts = 1;  // --peers: spread over this many loopback addresses (127.0.0.h)
  std::string transport = "auto";  // auto, tcp or shm (TrainConfig's TransportMode)
  uint32_t slot_bytes = net::ShmOptions{}.slot_bytes;
  uint32_t slots = net::ShmOptions{}.slots;
  std::size_t direct_min_bytes = net::ShmOptions{}.direct_min_bytes;
  int busy_poll_us = net::ShmOptions{}.busy_poll_us;
  std::string network;             // an emulated network (docs/HETEROGENEITY.md)
  std::vector<std::string> links;  // --link, over the network file
};

// `dpgossip bench link`: what each link delivers (--network and --link are added beside these,
// apps/emulation.h).
struct LinkBenchOptions {
  int peers = 2;
  std::string transport = "auto";
  double seconds = 0.5;  // the bulk transfer's size: about this long at the asked bandwidth
  int pings = 50;
  bool json = false;
  double timeout_s = 60;
  std::string hosts;        // one peer of a multi-process run
  std::optional<int> rank;
  std::string rows_out;     // where rank 0 writes its rows (JSON lines); stdout when empty
};

// `dpgossip bench startup`: from the start of a command to the end of its peers' first all-reduce.
struct StartupBenchOptions {
  int peers = 4;
  int repeats = 10;
  std::string baseline;  // "", "gloo", "mpi" or "gloo,mpi"
  std::string transport = "auto";
  bool json = false;
  double timeout_s = 60;
};

// The flags of each command, in its table's order, bound to `o`.
void add_step_flags(CLI::App& cmd, StepBenchOptions& o);
void add_allreduce_flags(CLI::App& cmd, AllreduceBenchOptions& o);
void add_link_flags(CLI::App& cmd, LinkBenchOptions& o);
void add_startup_flags(CLI::App& cmd, StartupBenchOptions& o);

// Each option's rule (its table row), then the rules between options. Throws invalid_argument
// naming the flag and the bad value: "--batch: must be at least 1, got 0".
void check(const StepBenchOptions& o);
void check(const AllreduceBenchOptions& o);
void check(const LinkBenchOptions& o);
void check(const StartupBenchOptions& o);

}  // namespace dpg::app
