#include "apps/bench/bench_options.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "apps/option_table.h"
#include "apps/parse.h"
#include "runtime/core/error.h"
#include "runtime/core/train_config.h"

namespace dpg::app {
namespace {

[[noreturn]] void bad(const std::string& what) { fail(Code::invalid_argument, what); }

// ---- Checks of one value that are more than a range or a list of names ---------------------

void check_widths(const std::string& text, const std::string& flag) {
  if (parse_int_list(text, flag).size() < 2) bad(flag + ": need at least inputs,classes");
}
void check_int_list(const std::string& text, const std::string& flag) {
  parse_int_list(text, flag);
}
void check_device(const std::string& text, const std::string& flag) {
  try {
    parse_device(text);
  } catch (const Error& e) {
    std::string why = e.what();  // "/device: ..." from the config's parser
    if (why.starts_with("/device: ")) why = why.substr(9);
    fail(e.code(), flag + ": " + why);
  }
}
void check_sizes(const std::string& text, const std::string& flag) {
  for (long long s : parse_size_list(text, flag)) {
    if (s % 4 != 0) bad(flag + ": " + std::to_string(s) + " bytes is not a whole number of floats");
  }
}
void check_baselines(const std::string& text, const std::string& flag) {
  std::stringstream ss(text);
  for (std::string b; std::getline(ss, b, ',');) {
    if (b != "gloo" && b != "mpi") {
      bad(flag + ": expected gloo, mpi or gloo,mpi; got \"" + shorten(b) + "\"");
    }
  }
}
// A transport mode this benchmark can time: not nccl, whose ranks each need a GPU.
void check_transport(const std::string& text, const std::string& flag) {
  TransportMode m;
  try {
    m = parse_enum<TransportMode>(text);
  } catch (const Error& e) {
    fail(Code::invalid_argument, flag + ": " + e.what());
  }
  if (m == TransportMode::nccl) {
    bad(flag + ": nccl needs a GPU for every rank, and this benchmark runs its peers on one "
               "machine; it times auto, tcp and shm");
  }
}

// ---- The tables: every option, once. Adding one: a member in bench_options.h and a row here --

using S = StepBenchOptions;
const std::vector<OptionRow<S>>& step_table() {
  static const std::vector<OptionRow<S>> rows = {
      option(&S::widths, "--widths", "layer widths, inputs to classes", check_widths),
      option(&S::activation, "--activation", "relu or tanh", EnumOf<Activation>{}),
      option(&S::threads, "--threads", "BLAS thread counts to run", check_int_list),
      option(&S::batch, "--batch", "batch size", at_least(1)),
      option(&S::seconds, "--seconds", "timed seconds per row", positive_up_to(3600)),
      option(&S::repeats, "--repeats", "timed windows per row (median)", at_least(1)),
      option(&S::rounds, "--rounds", "rounds of every row, run one after another (median)",
             at_least(1)),
      option(&S::baseline, "--baseline", "torch: also run PyTorch's step in this command",
             OneOf{{"", "torch"}}),
      option(&S::torch_script, "--torch-script", "path of the PyTorch script"),
      option(&S::python, "--python", "Python interpreter with torch"),
      option(&S::json, "--json", "one JSON object per row"),
      option(&S::device, "--device",
             "cpu, or cuda / cuda:N: the step on that GPU (PyTorch's baseline too)", check_device),
      option(&S::secure_noise, "--secure-noise",
             "also time the DP step with secure noise (the discrete Gaussian on a grid, "
             "from ChaCha20)"),
  };
  return rows;
}

using A = AllreduceBenchOptions;
bool local_peers(const A& o) { return o.hosts.empty(); }

const std::vector<OptionRow<A>>& allreduce_table() {
  static const std::vector<OptionRow<A>> rows = {
      // One peer moves nothing: its "all-reduce" takes no time and its bandwidth would be made up.
      option(&A::peers, "--peers", "peers on 127.0.0.1", between(2, 1024))
          .when(local_peers, "(local processes)"),
      option(&A::sizes, "--sizes", "buffer sizes in bytes (K = KiB, M = MiB)", check_sizes),
      option(&A::warmup, "--warmup", "untimed operations per size (fewer above 4 MiB)",
             at_least(0)),
      option(&A::repeats, "--repeats", "timed operations per size (fewer above 4 MiB)",
             at_least(1)),
      option(&A::baseline, "--baseline", "gloo, mpi or gloo,mpi: run them in this command too",
             check_baselines),
      option(&A::json, "--json", "one JSON object per row, then one per ratio"),
      option(&A::rounds, "--rounds",
             "rounds of every backend, one after another (rows: median; ratios: median of "
             "the per-round ratios)",
             at_least(1)),
      option(&A::segment_bytes, "--segment-bytes", "ring segment size"),
      option(&A::small_bytes, "--small-bytes",
             "largest size for recursive doubling (power-of-two peers; 0: ring only)"),
      option(&A::scratch_slots, "--scratch-slots", "reduce-scatter receive buffers in flight"),
      option(&A::medium_bytes, "--medium-bytes",
             "largest size for halving-doubling (power-of-two peers; 0: never)"),
      option(&A::socket_buffer_bytes, "--socket-buffer-bytes",
             "SO_SNDBUF/SO_RCVBUF (0: kernel autotuning)"),
      option(&A::spin_us, "--spin-us", "how long a wait yields before sleeping"),
      // Converted to milliseconds in a std::chrono duration; local peers are processes.
      option(&A::timeout_s, "--timeout-s", "timeout of every wait", positive_up_to(1e6)),
      option(&A::pin, "--pin", "pin peer r to CPU r mod the CPU count (the baselines' ranks too)"),
      option(&A::progress_thread, "--progress-thread",
             "run each peer's I/O on a thread of its own (default: on the waiting thread)"),
      option(&A::tls, "--tls",
             "with --peers: also run over TLS (a throwaway CA made for this command) and report "
             "its time over plain TCP's; with --hosts: use TLS with the hosts file's "
             "certificates"),
      option(&A::hierarchical, "--hierarchical",
             "with --peers: also run the hierarchical all-reduce (within each host, then across "
             "hosts) and report its time over the flat one's; with --hosts: run it alone"),
      option(&A::secure_aggregation, "--secure-aggregation",
             "also time the masked secure-aggregation exchange (pairwise ChaCha20 masks, then "
             "the exact uint32 all-reduce) of each size, alternating with the plain all-reduce, "
             "and report its time over the plain one's"),
      // Its range depends on --peers: a rule between options (check below).
      option(&A::emulated_hosts, "--emulated-hosts",
             "with --peers: spread the peers over this many hosts, 127.0.0.1 up, contiguous "
             "ranks per host (shared memory within one under --transport auto, TCP across)"),
      option(&A::transport, "--transport",
             "auto (shared memory between peers of one host, else TCP), tcp or shm",
             check_transport),
      option(&A::slot_bytes, "--slot-bytes", "shared memory: ring slot size (64-byte header)"),
      option(&A::slots, "--slots", "shared memory: slots per ring (one ring each way per pair)"),
      option(&A::direct_min_bytes, "--direct-min-bytes",
             "shared memory: messages this large are read from the sender's memory "
             "(process_vm_readv); 0: all through the ring"),
      option(&A::busy_poll_us, "--busy-poll-us",
             "shared memory: how long a wait polls without yielding while its peer runs "
             "(0: always yield; -1: 20 while this host's peers fit its CPUs, else 0)",
             between(-1, 1000000)),
      option(&A::network, "--network",
             "network file: every link's latency, jitter, bandwidth and loss, emulated on the "
             "sending side (docs/HETEROGENEITY.md)"),
      option(&A::links, "--link",
             "one emulated link (or default): A-B:latency=5ms,bw=100Mbit,jitter=1ms,loss=0.1% "
             "(repeatable; over --network)"),
      option(&A::hosts, "--hosts", "hosts file: run as one peer of it"),
      option(&A::rank, "--rank", "this peer's rank (default: from the launcher's environment)"),
      option(&A::rows_out, "--rows-out",
             "file for the rows (with --hosts: rank 0's, default stdout; with --peers: the "
             "merged rows, beside the report)"),
  };
  return rows;
}

using L = LinkBenchOptions;
bool local_link_peers(const L& o) { return o.hosts.empty(); }

const std::vector<OptionRow<L>>& link_table() {
  static const std::vector<OptionRow<L>> rows = {
      option(&L::peers, "--peers", "peers on 127.0.0.1 (every pair is probed)", between(2, 64))
          .when(local_link_peers, "(local processes)"),
      option(&L::transport, "--transport",
             "auto (shared memory between peers of one host, else TCP), tcp or shm",
             check_transport),
      option(&L::seconds, "--seconds",
             "the bulk transfer: about this long at the asked bandwidth (16 MiB unlimited)",
             positive_up_to(60)),
      option(&L::pings, "--pings", "round trips of a 64-byte message (median)", between(1, 100000)),
      option(&L::json, "--json", "one JSON object per link"),
      option(&L::timeout_s, "--timeout-s", "timeout of every wait", positive_up_to(1e6)),
      option(&L::hosts, "--hosts", "hosts file: run as one peer of it"),
      option(&L::rank, "--rank", "this peer's rank (default: from the launcher's environment)"),
      option(&L::rows_out, "--rows-out", "file for rank 0's rows (default: stdout)"),
  };
  return rows;
}

using Up = StartupBenchOptions;
const std::vector<OptionRow<Up>>& startup_table() {
  static const std::vector<OptionRow<Up>> rows = {
      option(&Up::peers, "--peers", "peers on 127.0.0.1", between(2, 64)),
      option(&Up::repeats, "--repeats", "starts of each backend (median, min, max)",
             between(1, 1000)),
      option(&Up::baseline, "--baseline", "gloo, mpi or gloo,mpi: time them in this command too",
             OneOf{{"", "gloo", "mpi", "gloo,mpi"}}),
      option(&Up::transport, "--transport",
             "dpgossip's transport (auto: shared memory here) and OpenMPI's (tcp: its TCP "
             "transport, else shared memory); Gloo has TCP only",
             check_transport),
      option(&Up::json, "--json", "one JSON object per backend, then one per ratio"),
      option(&Up::timeout_s, "--timeout-s", "the most one start may take", positive_up_to(3600)),
  };
  return rows;
}

}  // namespace

void add_startup_flags(CLI::App& cmd, StartupBenchOptions& o) {
  add_options(cmd, o, startup_table());
}
void check(const StartupBenchOptions& o) { check_options(o, startup_table()); }

void add_link_flags(CLI::App& cmd, LinkBenchOptions& o) { add_options(cmd, o, link_table()); }
void check(const LinkBenchOptions& o) { check_options(o, link_table()); }

void add_step_flags(CLI::App& cmd, StepBenchOptions& o) { add_options(cmd, o, step_table()); }
void add_allreduce_flags(CLI::App& cmd, AllreduceBenchOptions& o) {
  add_options(cmd, o, allreduce_table());
}

void check(const StepBenchOptions& o) {
  check_options(o, step_table());
  if (parse_device(o.device).cuda && o.secure_noise) {
    bad("--secure-noise: the CPU's ChaCha20 noise; the device step draws Philox noise (use "
        "--device cpu)");
  }
}

void check(const AllreduceBenchOptions& o) {
  check_options(o, allreduce_table());
  // TLS is a TCP layer: its rows and their plain partners both run over TCP, and shared memory,
  // which never leaves the host, has none to measure.
  if (o.tls && parse_enum<TransportMode>(o.transport) == TransportMode::shm) {
    bad("--tls: TLS runs over TCP; --transport shm has none (use auto or tcp)");
  }
  if (o.hierarchical && o.tls) bad("--hierarchical: not with --tls");
  // Secure aggregation is timed beside the flat plain all-reduce, as training runs it (which
  // takes neither the hierarchical all-reduce nor buckets with it); TLS is its own comparison.
  if (o.secure_aggregation && o.hierarchical) {
    bad("--secure-aggregation: not with --hierarchical (training masks over the flat all-reduce "
        "only)");
  }
  if (o.secure_aggregation && o.tls) {
    bad("--secure-aggregation: not with --tls (compare one at a time)");
  }
  if (local_peers(o) && (o.emulated_hosts < 1 || o.emulated_hosts > std::min(o.peers, 254))) {
    bad("--emulated-hosts: must be in [1, min(--peers, 254)], got " +
        std::to_string(o.emulated_hosts));
  }
}

}  // namespace dpg::app
