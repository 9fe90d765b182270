// dpgossip bench link: what each emulated link delivers (apps/emulation.h), beside what it was
// asked: the one-way latency from a ping-pong (median, min, max) and the bandwidth of a bulk
// transfer, over the transport a run would use (--transport). With --peers N it starts N peers on
// 127.0.0.1 and probes every pair, one after another; with --hosts it is one peer of a run across
// machines. Without --network or --link it measures the bare transport.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "apps/bench/bench_options.h"
#include "apps/commands.h"
#include "apps/emulation.h"
#include "apps/launch.h"
#include "apps/transport_setup.h"
#include "runtime/collective/communicator.h"
#include "runtime/core/bounds.h"
#include "runtime/core/error.h"
#include "runtime/core/hash.h"
#include "runtime/core/json_io.h"
#include "runtime/core/log.h"
#include "runtime/net/auth.h"
#include "runtime/net/hosts.h"
#include "runtime/net/link_probe.h"
#include "runtime/process/find.h"

namespace dpg::app {
namespace {

namespace fs = std::filesystem;

struct LinkBench {
  LinkBenchOptions o;
  EmulationFlags emulation;
};

// One pair's row: what was asked and what came, in milliseconds and Mbit/s.
Json row_of(int a, int b, const net::LinkShape& asked, const net::ProbeResult& r,
            const std::string& transport) {
  const double ms = static_cast<double>(r.one_way.count()) * 1e-6;
  const double asked_ms = static_cast<double>(asked.latency.count()) * 1e-6;
  Json j = {{"link", std::to_string(a) + "-" + std::to_string(b)},
            {"transport", transport},
            {"asked_latency_ms", asked_ms},
            {"asked_jitter_ms", static_cast<double>(asked.jitter.count()) * 1e-6},
            {"asked_mbit", asked.bits_per_second / 1e6},
            {"asked_loss", asked.loss},
            {"latency_ms", ms},
            {"latency_min_ms", static_cast<double>(r.min_one_way.count()) * 1e-6},
            {"latency_max_ms", static_cast<double>(r.max_one_way.count()) * 1e-6},
            {"latency_error_ms", ms - asked_ms},
            {"mbit", r.bits_per_second / 1e6}};
  if (asked.bits_per_second > 0) j["bandwidth_ratio"] = r.bits_per_second / asked.bits_per_second;
  return j;
}

// One peer: connects to every other, probes every pair in order, rank 0 writes the rows.
void run_peer(const LinkBench& b) {
  const LinkBenchOptions& o = b.o;
  const net::HostsFile hosts = net::load_hosts(o.hosts);
  const int world = hosts.world();
  if (world < 2) fail(Code::invalid_argument, o.hosts + ": a link needs 2 peers");
  const int rank = net::resolve_rank(o.rank, world);
  log::set_origin(rank);
  if (log::level() > log::Level::warn) log::set_level(log::Level::warn);
  const net::NetworkShape network = network_of(b.emulation, world);
  net::LinkOptions link;
  link.timeout = std::chrono::milliseconds(static_cast<long long>(o.timeout_s * 1000));
  link.connect_timeout = link.timeout;
  link.config_hash = fnv1a64("bench link " + network.describe() + " " + o.transport);
  link.progress_thread = true;
  std::vector<int> others;
  for (int p = 0; p < world; ++p) {
    if (p != rank) others.push_back(p);
  }
  const TransportMode mode = parse_enum<TransportMode>(o.transport);
  auto transport = make_transport(hosts, rank, others, mode, link);
  auto shaped = shape_links(*transport, network);
  net::Transport& carrier = shaped ? *shaped : *transport;
  collective::Communicator comm(carrier);
  std::vector<std::pair<int, int>> pairs;
  for (int a = 0; a < world; ++a) {
    for (int c = a + 1; c < world; ++c) pairs.emplace_back(a, c);
  }
  net::ProbeOptions po;
  po.pings = o.pings;
  const std::vector<net::ProbeResult> results =
      probe_pairs(comm, carrier, network, pairs, o.seconds, po);
  if (rank != 0) return;
  std::string text;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto [a, c] = pairs[i];
    text += row_of(a, c, network.between(a, c), results[i], o.transport).dump() + "\n";
  }
  if (o.rows_out.empty()) {
    std::cout << text << std::flush;
  } else {
    write_file_atomic(o.rows_out, text);
  }
}

void print_rows(const std::vector<Json>& rows, bool json) {
  if (json) {
    for (const Json& r : rows) std::cout << r.dump() << "\n";
    return;
  }
  std::cout << "| link | asked latency (ms) | delivered (ms), median (min-max) | error (ms) | "
               "asked bw (Mbit/s) | delivered (Mbit/s) | ratio |\n|---|---|---|---|---|---|---|\n";
  for (const Json& r : rows) {
    const double asked_mbit = r["asked_mbit"].get<double>();
    std::cout << "| " << r["link"].get<std::string>() << " | "
              << fixed_text(r["asked_latency_ms"].get<double>(), 3) << " | "
              << fixed_text(r["latency_ms"].get<double>(), 3) << " ("
              << fixed_text(r["latency_min_ms"].get<double>(), 3) << "-"
              << fixed_text(r["latency_max_ms"].get<double>(), 3) << ") | "
              << fixed_text(r["latency_error_ms"].get<double>(), 3) << " | "
              << (asked_mbit > 0 ? fixed_text(asked_mbit, 1) : std::string("unlimited")) << " | "
              << fixed_text(r["mbit"].get<double>(), 1) << " | "
              << (r.contains("bandwidth_ratio") ? fixed_text(r["bandwidth_ratio"].get<double>(), 3)
                                                : std::string("-"))
              << " |\n";
  }
  std::cout << std::flush;
}

// Starts --peers N local peers of this program and prints rank 0's rows.
void run_local(const LinkBench& b) {
  const LinkBenchOptions& o = b.o;
  // The description is checked here first, so that a bad flag is one error, not one per peer.
  network_of(b.emulation, o.peers);
  const TempDir tmp("dpgossip-link", "bench link");
  const fs::path& dir = tmp.path();
  net::HostsFile hosts = net::local_hosts(o.peers);
  hosts.secret = net::random_secret();
  const std::string hosts_path = (dir / "hosts.json").string();
  const std::string rows_path = (dir / "rows.jsonl").string();
  net::write_hosts(hosts, hosts_path);
  std::ostringstream seconds, timeout;
  seconds << o.seconds;
  timeout << o.timeout_s;
  std::vector<std::string> args = {"bench", "link", "--transport", o.transport,
                                   "--seconds", seconds.str(), "--pings", std::to_string(o.pings),
                                   "--timeout-s", timeout.str(), "--rows-out", rows_path};
  for (const std::string& a : network_args(b.emulation)) args.push_back(a);
  const int rc = supervise(local_children(hosts, hosts_path, proc::self_path().string(), args));
  if (rc != 0) fail(Code::aborted, "the benchmark peers failed (exit " + std::to_string(rc) + ")");
  std::ifstream in(rows_path);
  if (!in.is_open()) fail(Code::data_loss, rows_path + ": rank 0 wrote no rows");
  std::vector<Json> rows;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) rows.push_back(parse_json_text(line, rows_path + ":"));
  }
  print_rows(rows, o.json);
}

void run_link_bench(const LinkBench& b) {
  check(b.o);
  if (!b.o.hosts.empty()) return run_peer(b);
  run_local(b);
}

}  // namespace

void add_bench_link(CLI::App& bench) {
  auto b = std::make_shared<LinkBench>();
  auto* c = bench.add_subcommand(
      "link", "what each (emulated) link delivers: latency and bandwidth, beside what was asked");
  add_link_flags(*c, b->o);
  add_network_flags(*c, b->emulation, false);
  c->callback([b] { run_link_bench(*b); });
}

}  // namespace dpg::app
