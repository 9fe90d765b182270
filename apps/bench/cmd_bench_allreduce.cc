// dpgossip bench allreduce: time per operation, algorithm and bus bandwidth of the ring
// all-reduce over TCP or shared memory (--transport), optionally beside Gloo's ring and OpenMPI's
// MPI_Allreduce (over TCP, or over its shared-memory path when dpgossip's is) in one command,
// with one core's memory copy bandwidth, the machine's own limit, measured beside them.
//
// With --peers N it starts N peers on 127.0.0.1 (this same program with --hosts and --rank) and
// collects rank 0's rows; with --hosts and --rank (or a launcher's rank variable) it is one peer of
// a run across machines. With --tls the local peers run twice per round, over plain TCP and over
// TLS (a throwaway CA made for the command), and the TLS rows carry their time over the plain one.
// With --secure-aggregation every peer agrees pairwise mask keys once (X25519, as training does)
// and times, beside each plain float all-reduce, the masked exchange of as many 32-bit values
// (mask, then the exact modular all-reduce), alternating with it; its rows carry their time over
// the plain one.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "apps/bench/allreduce_report.h"
#include "apps/bench/bench_baseline.h"
#include "apps/bench/bench_options.h"
#include "apps/bench/limits.h"
#include "runtime/core/bench_row.h"
#include "apps/bench/row_json.h"
#include "apps/commands.h"
#include "apps/emulation.h"
#include "apps/launch.h"
#include "apps/parse.h"
#include "runtime/process/find.h"
#include "apps/throwaway_pki.h"
#include "apps/transport_setup.h"
#include "dp/secagg.h"
#include "runtime/train/algorithm.h"
#include "runtime/collective/communicator.h"
#include "runtime/collective/hierarchical.h"
#include "runtime/core/bounds.h"
#include "runtime/core/error.h"
#include "runtime/core/hash.h"
#include "runtime/core/json_io.h"
#include "runtime/core/log.h"
#include "runtime/net/auth.h"
#include "runtime/net/hosts.h"

namespace dpg::app {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using bench::AllreduceRow;
using bench::make_row;
using bench::repeats_for_size;

using bench_report::kHierBackend;
using bench_report::kSecAggBackend;
using bench_report::kTlsBackend;

// What one run of the local peers measures: the flat all-reduce over plain links, over TLS, or
// the hierarchical all-reduce.
enum class Variant { plain, tls, hierarchical };

// --transport, once check() has passed it.
TransportMode mode_of(const AllreduceBenchOptions& o) {
  return parse_enum<TransportMode>(o.transport);
}

// Rank-valued inputs whose sum is exact in float: x[i] = rank + 1 + i % 3.
void fill(std::vector<float>& v, int rank) {
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(rank + 1 + int(i % 3));
}

bool check(const std::vector<float>& v, int n) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] != float(n * (n + 1) / 2 + n * int(i % 3))) return false;
  }
  return true;
}

// The secure-aggregation check's inputs: rank-dependent and spread over all 32 bits, so that
// their sum wraps modulo 2^32: x[i] = (rank + 1) * A + i * B.
constexpr std::uint32_t kSecAggA = 0x9E3779B9u;
constexpr std::uint32_t kSecAggB = 2654435761u;

std::uint32_t secagg_value(int rank, std::size_t i) {
  return static_cast<std::uint32_t>(rank + 1) * kSecAggA + static_cast<std::uint32_t>(i) * kSecAggB;
}

void fill(std::vector<std::uint32_t>& v, int rank) {
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = secagg_value(rank, i);
}

// The exact sum over n peers modulo 2^32: A * n(n+1)/2 + n * i * B.
bool check(const std::vector<std::uint32_t>& v, int n) {
  const auto ranks = static_cast<std::uint32_t>(static_cast<std::uint64_t>(n) * (n + 1) / 2);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uint32_t want =
        ranks * kSecAggA + static_cast<std::uint32_t>(n) * static_cast<std::uint32_t>(i) * kSecAggB;
    if (v[i] != want) return false;
  }
  return true;
}

// With --secure-aggregation, plain and masked operations alternate in blocks of this many.
constexpr int kSecAggBlock = 25;

// The links' options of one peer, from the command's flags: what every link shares, and each
// transport's own.
struct Links {
  net::LinkOptions link;
  net::TcpOptions tcp;
  net::ShmOptions shm;
};

Links link_options(const AllreduceBenchOptions& o) {
  Links l;
  l.link.timeout = std::chrono::milliseconds(static_cast<long long>(o.timeout_s * 1000));
  l.link.connect_timeout = l.link.timeout;
  l.link.config_hash = fnv1a64(o.sizes + "/" + std::to_string(o.segment_bytes) + "/" +
                               std::to_string(o.small_bytes) + "/" +
                               std::to_string(o.scratch_slots) + "/" +
                               std::to_string(o.medium_bytes) + "/" + o.transport +
                               (o.secure_aggregation ? "/secagg" : "") + "/" +
                               network_of({o.network, o.links, {}}, 1 << 20).describe());
  l.link.spin_us = o.spin_us;
  // The shaper's threads send while the caller waits: the transport needs its progress thread.
  l.link.progress_thread =
      o.progress_thread || network_of({o.network, o.links, {}}, 1 << 20).any();
  l.tcp.socket_buffer_bytes = o.socket_buffer_bytes;
  l.tcp.tls = o.tls;
  l.shm.slot_bytes = o.slot_bytes;
  l.shm.slots = o.slots;
  l.shm.direct_min_bytes = o.direct_min_bytes;
  l.shm.busy_poll_us = o.busy_poll_us;
  return l;
}

// One peer's all-reduces: the flat or the hierarchical one, and with --secure-aggregation the
// masked exchange (the keys once, then a fresh nonce, a step, for every masking, as every
// training step has its own).
class PeerBench {
 public:
  PeerBench(const AllreduceBenchOptions& o, const net::HostsFile& hosts, int rank)
      : o_(o), rank_(rank), n_(hosts.world()), links_(link_options(o)),
        copt_{o.segment_bytes, o.small_bytes, o.scratch_slots, o.medium_bytes} {
    std::vector<int> peers = collective::peers_needed(rank, n_, copt_);
    if (o.hierarchical) {
      for (int p : collective::hierarchical_peers(rank, host_ids(hosts), copt_)) {
        if (std::find(peers.begin(), peers.end(), p) == peers.end()) peers.push_back(p);
      }
    }
    transport_ =
        make_transport(hosts, rank, peers, mode_of(o), links_.link, links_.tcp, links_.shm);
    shaped_ = shape_links(*transport_, network_of({o.network, o.links, {}}, n_));
    comm_.emplace(shaped_ ? *shaped_ : *transport_, copt_);
    if (o.hierarchical) hierarchy_.emplace(*comm_, host_ids(hosts));
    if (o.secure_aggregation) masker_.emplace(train::agree_masks(*comm_, links_.link.config_hash));
  }

  // The rows of one size: the plain (or TLS, or hierarchical) all-reduce's, then the masked
  // exchange's when there is one.
  std::vector<AllreduceRow> time_size(long long bytes) {
    std::vector<float> v(static_cast<std::size_t>(bytes / 4));
    fill(v, rank_);
    std::vector<std::uint32_t> u(masker_ ? v.size() : 0);
    fill(u, rank_);
    // Warm-up and timed counts both shrink above 4 MiB, as in the baseline programs.
    const int warmup = repeats_for_size(bytes, o_.warmup);
    for (int i = 0; i < warmup; ++i) {
      allreduce(v);
      if (masker_) secure(u);
    }
    const int repeats = repeats_for_size(bytes, o_.repeats);
    std::vector<double> times, secure_times;
    // As the baseline programs do: one barrier, then each operation timed alone, back to back.
    // With --secure-aggregation, blocks of kSecAggBlock plain and of as many masked operations
    // alternate, each after a barrier, so drift in load hits both alike. (Alternating single
    // operations would not do: the peers' phase then differs by kind, and rank 0 would time one
    // kind waiting for the others and the other kind with their data already there.)
    const int block = masker_ ? kSecAggBlock : repeats;
    for (int done = 0; done < repeats; done += block) {
      const int count = std::min(block, repeats - done);
      comm_->barrier();
      timed(times, count, [&] { allreduce(v); });
      if (!masker_) continue;
      comm_->barrier();
      timed(secure_times, count, [&] { secure(u); });
    }
    const std::array<bool, 2> ok = verify(v, u);
    std::vector<AllreduceRow> rows;
    rows.push_back(make_row(o_.tls ? kTlsBackend : o_.hierarchical ? kHierBackend : "dpgossip",
                            n_, bytes, times));
    rows.back().ok = ok[0];
    if (masker_) {
      rows.push_back(make_row(kSecAggBackend, n_, bytes, secure_times));
      rows.back().ok = ok[1];
    }
    return rows;
  }

 private:
  // The benchmark's buffers are synthetic: public values.
  void allreduce(std::span<float> v) {
    if (hierarchy_) {
      hierarchy_->allreduce(public_value(v));
    } else {
      comm_->allreduce(public_value(v));
    }
  }

  // The masked exchange: mask, then the exact modular all-reduce.
  void secure(std::vector<std::uint32_t>& u) {
    masker_->mask(u, step_++);
    comm_->allreduce(public_value(std::span<std::uint32_t>(u)));
  }

  template <class Op>
  static void timed(std::vector<double>& out, int count, Op&& op) {
    for (int i = 0; i < count; ++i) {
      const auto t0 = Clock::now();
      op();
      out.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
  }

  // Whether one more all-reduce (and masked exchange) of fresh inputs gave the exact sums on
  // every peer: {plain, masked}.
  std::array<bool, 2> verify(std::vector<float>& v, std::vector<std::uint32_t>& u) {
    fill(v, rank_);
    allreduce(v);
    double bad[2] = {check(v, n_) ? 0.0 : 1.0, 0.0};
    if (masker_) {
      // Masked inputs summed give the plain inputs' exact sum modulo 2^32; the masks must also
      // have changed what this peer sends (with another peer to pair with).
      fill(u, rank_);
      masker_->mask(u, step_++);
      bool changed = n_ == 1;
      for (std::size_t i = 0; i < u.size() && !changed; ++i) {
        changed = u[i] != secagg_value(rank_, i);
      }
      comm_->allreduce(public_value(std::span<std::uint32_t>(u)));
      bad[1] = changed && check(u, n_) ? 0.0 : 1.0;
    }
    comm_->allreduce(public_value(std::span<double>(bad, 2)));
    return {bad[0] == 0.0, bad[1] == 0.0};
  }

  const AllreduceBenchOptions& o_;
  const int rank_, n_;
  const Links links_;
  const collective::Options copt_;
  // Declared in the order they depend on each other: each is destroyed before what it uses.
  std::unique_ptr<net::Transport> transport_;
  std::unique_ptr<net::Transport> shaped_;  // the emulated network over it (--network, --link)
  std::optional<collective::Communicator> comm_;
  std::optional<collective::Hierarchy> hierarchy_;
  std::optional<dp::PairwiseMasker> masker_;
  std::uint64_t step_ = 0;
};

// One peer: times every size and, on rank 0, reports the rows.
void run_peer(const AllreduceBenchOptions& o, const std::vector<long long>& sizes) {
  const net::HostsFile hosts = net::load_hosts(o.hosts);
  if (hosts.world() < 2) {
    fail(Code::invalid_argument, o.hosts + ": an all-reduce needs at least 2 peers, the file has " +
                                     std::to_string(hosts.world()));
  }
  const int rank = net::resolve_rank(o.rank, hosts.world());
  log::set_origin(rank);
  // The rows are the output: a peer reports only warnings and errors.
  if (log::level() > log::Level::warn) log::set_level(log::Level::warn);
  if (o.pin) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(rank % static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)), &set);
    sched_setaffinity(0, sizeof set, &set);
  }
  PeerBench bench(o, hosts, rank);
  std::vector<AllreduceRow> rows;
  for (long long bytes : sizes) {
    const std::vector<AllreduceRow> more = bench.time_size(bytes);
    rows.insert(rows.end(), more.begin(), more.end());
  }
  if (rank != 0) return;
  std::string text;
  for (const auto& r : rows) text += bench::to_json_line(r) + "\n";
  if (o.rows_out.empty()) {
    std::cout << text << std::flush;
  } else {
    write_file_atomic(o.rows_out, text);
  }
}

// Starts --peers N local peers of this program (over TLS, or hierarchical, as `variant` says)
// and returns rank 0's rows. The peers share a fresh cluster secret, so the plain and the TLS
// runs both authenticate. With --emulated-hosts K, peer r's host is 127.0.0.(1 + rK/N).
std::vector<AllreduceRow> run_local(const AllreduceBenchOptions& o, Variant variant) {
  const bool tls = variant == Variant::tls;
  char tmpl[] = "/tmp/dpgossip-bench.XXXXXX";
  if (!mkdtemp(tmpl)) fail(Code::unavailable, "cannot make a temporary directory in /tmp");
  const fs::path dir = tmpl;
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};
  net::HostsFile hosts = net::local_hosts(o.peers);
  for (int r = 0; r < o.peers; ++r) {
    const int h = static_cast<int>(static_cast<long long>(r) * o.emulated_hosts / o.peers);
    hosts.peers[static_cast<std::size_t>(r)].host = "127.0.0." + std::to_string(1 + h);
  }
  hosts.secret = net::random_secret();
  if (tls) make_throwaway_pki(dir.string(), hosts);
  const std::string hosts_path = (dir / "hosts.json").string();
  const std::string rows_path = (dir / "rows.jsonl").string();
  net::write_hosts(hosts, hosts_path);
  std::ostringstream timeout;
  timeout << o.timeout_s;
  std::vector<std::string> args = {"bench", "allreduce", "--sizes", o.sizes,
                                   "--warmup", std::to_string(o.warmup),
                                   "--repeats", std::to_string(o.repeats),
                                   "--segment-bytes", std::to_string(o.segment_bytes),
                                   "--small-bytes", std::to_string(o.small_bytes),
                                   "--scratch-slots", std::to_string(o.scratch_slots),
                                   "--medium-bytes", std::to_string(o.medium_bytes),
                                   "--socket-buffer-bytes", std::to_string(o.socket_buffer_bytes),
                                   "--spin-us", std::to_string(o.spin_us),
                                   "--timeout-s", timeout.str(), "--rows-out", rows_path,
                                   "--transport", o.transport,
                                   "--slot-bytes", std::to_string(o.slot_bytes),
                                   "--slots", std::to_string(o.slots),
                                   "--direct-min-bytes", std::to_string(o.direct_min_bytes),
                                   "--busy-poll-us", std::to_string(o.busy_poll_us)};
  for (const std::string& a : network_args({o.network, o.links, {}})) args.push_back(a);
  if (o.pin) args.push_back("--pin");
  if (o.progress_thread) args.push_back("--progress-thread");
  if (tls) args.push_back("--tls");
  if (variant == Variant::hierarchical) args.push_back("--hierarchical");
  if (o.secure_aggregation) args.push_back("--secure-aggregation");
  const int rc = supervise(local_children(hosts, hosts_path, proc::self_path().string(), args));
  if (rc != 0) fail(Code::aborted, "the benchmark peers failed (exit " + std::to_string(rc) + ")");
  std::ifstream in(rows_path);
  if (!in.is_open()) fail(Code::data_loss, rows_path + ": rank 0 wrote no rows");
  std::ostringstream text;
  text << in.rdbuf();
  return bench::parse_allreduce_rows(text.str(), rows_path);
}

std::vector<std::string> parse_baselines(const std::string& text) {
  std::vector<std::string> baselines;
  std::stringstream ss(text);
  for (std::string b; std::getline(ss, b, ',');) baselines.push_back(b);
  return baselines;
}

// Every round runs every backend on every size; odd rounds run the baselines first, so that
// neither side always follows the other. Rows are medians over rounds; each ratio is taken
// within a round, between runs a few seconds apart, then its median over rounds is reported.
// With --tls, each round runs plain TCP and TLS back to back, in alternating order.
void run_rounds(const AllreduceBenchOptions& o, bench_report::Runs& runs) {
  std::vector<Variant> variants = {Variant::plain};
  if (o.tls) variants.push_back(Variant::tls);
  if (o.hierarchical) variants.push_back(Variant::hierarchical);
  // Every peer's links over TCP: --transport tcp, or a host per peer.
  const bool over_tcp = mode_of(o) == TransportMode::tcp || o.emulated_hosts == o.peers;
  for (int round = 0; round < o.rounds; ++round) {
    std::vector<AllreduceRow> rows;
    auto ours = [&] {
      std::vector<Variant> order = variants;
      if (round % 2 == 1) std::reverse(order.begin(), order.end());
      for (Variant v : order) {
        auto more = run_local(o, v);
        rows.insert(rows.end(), more.begin(), more.end());
      }
    };
    if (round % 2 == 0) ours();
    for (const auto& b : runs.baselines) {
      // OpenMPI over the same medium: its shared-memory path (vader) when dpgossip's peers
      // share memory (all local peers do under auto), else TCP.
      auto more = run_baseline(b, o.peers, runs.sizes, o.warmup, o.repeats, o.pin,
                               mode_of(o) != TransportMode::tcp);
      rows.insert(rows.end(), more.begin(), more.end());
    }
    if (round % 2 == 1) ours();
    // Over TCP, the loopback's own rate in the same round, for the share of it reached.
    if (over_tcp) runs.loopback.push_back(tcp_loopback_GBps());
    runs.by_round.push_back(std::move(rows));
  }
}

// Before any peer starts: a peer holds the largest buffer once (in place) beside its process
// (measured: 256 MiB took 265 MiB a peer); a baseline's rank, or the TLS, hierarchical or
// secure-aggregation rows beside the plain ones, hold a second.
void require_bench_memory(const AllreduceBenchOptions& o, const std::vector<long long>& sizes,
                          int local_peers) {
  const double largest = static_cast<double>(*std::max_element(sizes.begin(), sizes.end()));
  const bool second = !o.baseline.empty() || o.tls || o.hierarchical || o.secure_aggregation;
  const double need = local_peers * (largest * (second ? 2 : 1) + 40.0 * (1 << 20));
  require_memory(need < 1.8e19 ? static_cast<std::uint64_t>(need) : UINT64_MAX,
                 "bench allreduce: " +
                     (local_peers > 1 ? std::to_string(local_peers) + " peers" : std::string("a peer")) +
                     " with --sizes up to " + bytes_text(static_cast<std::uint64_t>(largest)),
                 "smaller --sizes" + std::string(local_peers > 1 ? " or fewer --peers" : ""));
}

void run_allreduce_bench(AllreduceBenchOptions o) {
  check(o);
  // TLS's rows and their plain partners both run over TCP.
  if (o.tls) o.transport = "tcp";
  bench_report::Runs runs;
  runs.sizes = parse_size_list(o.sizes, "--sizes");
  require_bench_memory(o, runs.sizes, o.hosts.empty() ? o.peers : 1);
  if (!o.hosts.empty()) return run_peer(o, runs.sizes);
  // One error for a bad description, before any peer starts.
  const std::string emulated = network_of({o.network, o.links, {}}, o.peers).describe();
  if (!emulated.empty()) {
    if (!o.baseline.empty()) {
      fail(Code::invalid_argument, "--baseline: Gloo and OpenMPI run on the bare links, not on "
                                   "the emulated network of --network and --link");
    }
    std::cerr << "emulated network: " << emulated << std::endl;
  }
  runs.peers = o.peers;
  runs.baselines = parse_baselines(o.baseline);
  runs.tls = o.tls;
  runs.hierarchical = o.hierarchical;
  runs.secure_aggregation = o.secure_aggregation;
  runs.backends = {"dpgossip"};
  if (o.tls) runs.backends.push_back(kTlsBackend);
  if (o.hierarchical) runs.backends.push_back(kHierBackend);
  // Timed in the plain run's own peers, alternating with its operations.
  if (o.secure_aggregation) runs.backends.push_back(kSecAggBackend);
  for (const auto& b : runs.baselines) runs.backends.push_back(bench_report::backend_of(b));
  run_rounds(o, runs);
  const std::vector<AllreduceRow> rows = bench_report::merged_rows(runs);
  bench_report::print_report(runs, rows, bench_report::ratios_of(runs), memcpy_GBps(), o.json,
                             o.transport);
  if (!o.rows_out.empty()) {  // the merged rows, one JSON line each, beside the report
    std::string text;
    for (const auto& r : rows) text += bench::to_json_line(r) + "\n";
    write_file_atomic(o.rows_out, text);
  }
  for (const auto& r : rows) {
    if (!r.ok) fail(Code::internal, r.backend + " all-reduce of " + std::to_string(r.bytes) +
                                        " bytes gave a wrong result");
  }
}

}  // namespace

void add_bench_allreduce(CLI::App& bench) {
  auto o = std::make_shared<AllreduceBenchOptions>();
  auto* c = bench.add_subcommand("allreduce",
                                 "all-reduce time and bandwidth over TCP or shared memory");
  add_allreduce_flags(*c, *o);
  c->callback([o] { run_allreduce_bench(*o); });
}

}  // namespace dpg::app
