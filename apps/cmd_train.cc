// dpgossip train: config from a JSON file, every field overridable by a flag; prepares
// Fashion-MNIST first when the data folder has no manifest yet. With any --algo but single and a
// hosts file it is one peer of a run over TCP; rank 0 reports and writes the metrics.
#include <signal.h>

#include <atomic>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "apps/commands.h"
#include "apps/config_flags.h"
#include "apps/device_backend.h"
#include "apps/device_setup.h"
#include "apps/emulation.h"
#include "apps/gossip_setup.h"
#include "apps/guards.h"
#include "apps/status_feed.h"
#include "apps/status_page.h"
#include "apps/status_report.h"
#include "apps/trace_output.h"
#include "apps/transport_setup.h"
#include "runtime/core/error.h"
#include "runtime/core/hash.h"
#include "runtime/core/json_io.h"
#include "runtime/core/log.h"
#include "runtime/core/train_config.h"
#include "runtime/collective/communicator.h"
#include "runtime/collective/hierarchical.h"
#include "runtime/data/dataset.h"
#include "runtime/data/peer_data.h"
#include "runtime/net/hosts.h"
#include "runtime/net/tracing_transport.h"
#include "runtime/train/algorithm.h"
#include "runtime/train/trainer.h"

namespace dpg::app {
namespace {

// Set by SIGINT and SIGTERM: the trainer stops at the next stop check, writes a checkpoint and
// returns; a second signal ends the process at once (SA_RESETHAND restores the default action).
// A lock-free atomic is async-signal-safe to store to.
std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void request_stop(int) { g_stop_requested.store(true, std::memory_order_relaxed); }

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  for (int sig : {SIGINT, SIGTERM}) {
    if (sigaction(sig, &sa, nullptr) != 0) {
      fail(Code::internal, "train: cannot install the handler of signal " + std::to_string(sig));
    }
  }
}

struct TrainFlags {
  std::string config_file;
  ConfigFlags flags;  // every config_fields() row
  bool json = false;
  std::string hosts;            // hosts file: this process is one peer of it
  std::optional<int> rank;      // default: from the launcher's environment
  bool tls = false;             // TLS on every connection, with the hosts file's certificates
  EmulationFlags emulation;     // --network, --link, --slowdown
  // The live status page (docs/STATUS.md), served by rank 0 only.
  std::optional<std::uint16_t> status_port;
  std::string status_address = "127.0.0.1";
  double status_linger_s = 0;   // seconds rank 0 keeps serving once the run has ended
  std::string report;           // rank 0 writes the run's report (HTML) here at its end
  // Every peer sends its live figures to rank 0 (apps/status_feed.h) when the run has a page or
  // a report; the peers agree on it at connection.
  bool status_feed() const { return status_port.has_value() || !report.empty(); }
};

// Applies each flag that was given on the command line over the config read from the file.
TrainConfig merge(const CLI::App& cmd, const TrainFlags& f) {
  const Json file = f.config_file.empty() ? Json::object() : read_json_file(f.config_file);
  TrainConfig c = f.config_file.empty() ? TrainConfig{}
                                         : train_config_from_json(file, f.config_file + ":");
  std::set<std::string> set;  // the keys the file or a flag sets
  if (file.is_object()) {
    for (const auto& [key, value] : file.items()) set.insert(key);
  }
  auto given = [&](const std::string& flag) { return cmd.get_option(flag)->count() > 0; };
  if (given("--noise-multiplier") && given("--target-epsilon")) {
    fail(Code::invalid_argument,
         "train: give --noise-multiplier or --target-epsilon, not both");
  }
  apply_config_flags(cmd, f.flags, "train", c, set);
  if (given("--target-epsilon")) c.noise_multiplier = 0;  // calibrate to the new target
  apply_no_dp_defaults(c, set);
  try {
    validate(c);
  } catch (const Error& e) {
    fail(e.code(), std::string("train: configuration ") + e.what());
  }
  return c;
}

// Rank 0 prepares Fashion-MNIST when the folder has none; the others wait for it (bounded).
data::Prepared load_or_prepare(const TrainConfig& c, int rank, int world) {
  if (!std::filesystem::exists(std::filesystem::path(c.data) / "manifest.json")) {
    if (rank == 0) {
      DPG_INFO("train: " << c.data << " has no manifest.json; preparing Fashion-MNIST there first");
      data::PrepareOptions p;
      p.out_dir = c.data;
      data::prepare(p);
    } else {
      data::wait_for_manifest(c.data, std::chrono::seconds(300));
    }
  }
  set_activity("loading rank " + std::to_string(rank) + "'s data from " + c.data);
  data::Prepared d = data::load_for_peer(c.data, rank, world, c.seed);
  require_train_memory(c, d, world);
  set_activity("training");
  return d;
}

// The peers of this run: the hosts file for any --algo but single, or this process alone.
struct Peers {
  net::HostsFile hosts;
  int rank = 0;
  int world() const { return hosts.peers.empty() ? 1 : hosts.world(); }
};

Peers peers_for(const TrainConfig& c, const TrainFlags& f) {
  Peers p;
  if (c.algo == Algo::single) {
    if (!f.hosts.empty() || f.rank || f.tls) {
      fail(Code::invalid_argument,
           "train: --hosts, --rank and --tls need an --algo other than single");
    }
    return p;
  }
  if (f.hosts.empty()) {
    if (f.rank && *f.rank != 0) {
      fail(Code::invalid_argument, "train: --rank without --hosts (give the hosts file)");
    }
    if (f.tls) {
      fail(Code::invalid_argument,
           "train: --tls needs --hosts (the hosts file names the certificates)");
    }
    return p;  // an all-reduce (or gossip) among one peer
  }
  p.hosts = net::load_hosts(f.hosts);
  p.rank = net::resolve_rank(f.rank, p.hosts.world());
  return p;
}

void append_metrics(const std::string& path, const Json& line) {
  if (path.empty()) return;
  append_checked(path, line.dump() + "\n", "metrics");
}

// "gossip-ring-n8-20261121-101500": algorithm, graph, peers and the start time.
std::string default_run_name(const TrainConfig& c, int world) {
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y%m%d-%H%M%S", std::localtime(&now));
  const bool uses_graph = train::algo_info(c.algo).uses_graph;
  std::string graph =
      uses_graph ? "-" + std::filesystem::path(c.topology).stem().string() : "";
  if (uses_graph && !c.topology_schedule.empty()) graph += "-swap";
  return to_string(c.algo) + graph + "-n" + std::to_string(world) + "-" + when;
}

// A fixed noise seed in a config the peers share lets each of them regenerate the others' noise
// and batch membership: with more than one peer it takes an explicit acknowledgement.
void check_noise_seed(const TrainConfig& c, int world) {
  if (c.noise_seed == 0 || world <= 1) return;
  if (!c.insecure_fixed_seed) {
    fail(Code::invalid_argument,
         "train: /noise_seed is set with " + std::to_string(world) +
             " peers: whoever holds it can compute every peer's noise and batches; leave it 0 "
             "(a secret seed from the OS) or add --insecure-fixed-seed for a reproducible, "
             "non-private experiment");
  }
  DPG_WARN("train: insecure fixed noise seed: every peer that knows it can compute this peer's "
           "noise and batches, so the privacy guarantee does not hold against them");
}

// This peer's links to the others: the transport the hosts file and --transport give, seen
// through the tracer when it is on, and the collectives over it. Declared in the order they
// depend on each other, so each is destroyed before what it uses.
struct Links {
  std::unique_ptr<net::Transport> transport;
  std::unique_ptr<net::Transport> shaped;  // the emulated network over it (--network, --link)
  std::optional<net::LinkCounters> counters;  // for the status feed
  std::optional<net::TracingTransport> traced;
  std::optional<collective::Communicator> comm;
  TransportPlan plan;  // which peers this one reaches over shared memory, which over TCP
};

// The peers rank `rank` connects to: the collectives' (the initial broadcast, evaluation and
// metrics), plus the algorithm's own (gossip: the neighbours of every graph of the run), plus
// rank 0 for the status feed (rank 0: everyone).
std::set<int> peers_of(int rank, const TrainConfig& c, const Peers& peers,
                       const train::AlgoInfo& algo, const std::vector<train::GossipPhase>& phases,
                       bool feed) {
  const collective::Options copt;
  std::set<int> talk_to;
  if (feed) {
    for (int p = 0; p < peers.world(); ++p) {
      if (p != rank && (rank == 0 || p == 0)) talk_to.insert(p);
    }
  }
  for (int p : collective::peers_needed(rank, peers.world(), copt)) talk_to.insert(p);
  for (int p : algo.peers(c, rank, peers.world(), phases)) talk_to.insert(p);
  if (c.hierarchical) {
    for (int p : collective::hierarchical_peers(rank, host_ids(peers.hosts), copt)) {
      talk_to.insert(p);
    }
  }
  return talk_to;
}

void connect(Links& links, const TrainConfig& c, const TrainFlags& flags, const Peers& peers,
             const train::AlgoInfo& algo, const std::vector<train::GossipPhase>& phases,
             const net::NetworkShape& network, trace::Tracer& tracer) {
  net::LinkOptions link;
  link.timeout = std::chrono::milliseconds(static_cast<long long>(c.timeout_s * 1000));
  link.connect_timeout = link.timeout;
  // The hosts file's topology and the emulated network are part of what the peers must share
  // when a run uses them.
  const std::string emulated = network.describe();
  link.config_hash = shared_settings_hash(c) ^
                     (peers.hosts.topology.is_null() ? 0 : fnv1a64(peers.hosts.topology.dump())) ^
                     (emulated.empty() ? 0 : fnv1a64("network " + emulated)) ^
                     (flags.status_feed() ? fnv1a64("status feed") : 0);
  // An algorithm that overlaps communication with computation needs a progress thread, and so
  // does the shaper, whose threads send while the training thread waits.
  link.progress_thread = algo.overlaps(c) || network.any();
  link.stop = &g_stop_requested;  // SIGINT or SIGTERM ends the set-up within 100 ms
  net::TcpOptions tcp;
  tcp.tls = flags.tls;
  const std::set<int> talk_to = peers_of(peers.rank, c, peers, algo, phases, flags.status_feed());
  links.transport = make_transport(peers.hosts, peers.rank,
                                   std::vector<int>(talk_to.begin(), talk_to.end()), c.transport,
                                   link, tcp, {}, &links.plan);
  if (!emulated.empty() && peers.rank == 0) DPG_INFO("emulated network: " << emulated);
  links.shaped = shape_links(*links.transport, network);
  net::Transport& carrier = links.shaped ? *links.shaped : *links.transport;
  if (flags.status_feed()) links.counters.emplace(peers.world());
  if (tracer.on() || links.counters) {
    links.traced.emplace(carrier, tracer, links.counters ? &*links.counters : nullptr);
  }
  links.comm.emplace(links.traced ? static_cast<net::Transport&>(*links.traced) : carrier,
                     collective::Options{});
  if (!links.shaped) return;
  // What the emulated links deliver, beside what they were asked.
  auto connected = [&](int a, int b) {
    return peers_of(a, c, peers, algo, phases, flags.status_feed()).count(b) > 0;
  };
  probe_links(*links.comm, *links.shaped, network,
              links_to_probe(network, peers.world(), connected), 0.2);
}

// Rank 0's last words on stdout without --json: where a stopped run's checkpoints are, or the
// finished run's accuracy, privacy, graph and speed. `s` is the summary's JSON.
void print_summary(const TrainConfig& c, const train::TrainSummary& summary,
                   const dp::PrivacyPlan& plan, const Json& s) {
  if (summary.stopped_at >= 0) {
    std::cout << "stopped by a signal after " << summary.stopped_at << " of " << summary.steps
              << " steps, epsilon so far "
              << (c.dp ? std::to_string(summary.epsilon) : std::string("inf (no DP)"))
              << (c.checkpoint_dir.empty()
                      ? std::string("; no --checkpoint-dir, so nothing was saved")
                      : "; every peer's checkpoint is in " + c.checkpoint_dir +
                            " (continue with --resume)")
              << "\n";
    return;
  }
  std::cout << "test accuracy " << 100 * summary.test_accuracy << "%, epsilon "
            << (c.dp ? std::to_string(summary.epsilon) : std::string("inf (no DP)"))
            << " at delta " << c.delta;
  if (c.dp && plan.peers > 1) {
    std::cout << " for the model (" << to_string(c.algo) << ", " << plan.noise_mode
              << " noise; the worst peer's data); epsilon " << summary.message_epsilon
              << " for any one peer's messages";
  }
  if (s.contains("topology") && s["topology"] != to_string(c.algo)) {
    std::cout << " (graph " << s["topology"].get<std::string>();
    if (s.contains("pairings")) {
      std::cout << ", " << s["pairings"].get<long long>() << " pairings";
    } else if (s.contains("rho")) {
      std::cout << ", rho " << s["rho"].get<double>();
    }
    std::cout << ")";
  }
  std::cout << ", " << summary.peers << " peer" << (summary.peers > 1 ? "s" : "")
            << ", noise multiplier " << plan.model_sigma << ", " << summary.steps << " steps, "
            << train::throughput_text(summary.samples_per_second) << "\n";
}

// Rank 0's status page, for --status-port (docs/STATUS.md): listening from the set-up on, so
// that a port in use fails the run before any peer is connected.
// With --report and no page, the board alone.
std::unique_ptr<StatusPage> listen_status(const TrainFlags& flags, const Peers& peers) {
  if (peers.rank != 0 || (!flags.status_port && flags.report.empty())) return nullptr;
  if (!flags.report.empty()) check_output_path(flags.report, "--report", OutputKind::replaced);
  if (!flags.status_port) return std::make_unique<StatusPage>(std::nullopt);
  StatusListen listen;
  listen.address = flags.status_address;
  listen.port = *flags.status_port;
  if (listen.address != "127.0.0.1" && listen.address != "::1") listen.token = peers.hosts.secret;
  auto page = std::make_unique<StatusPage>(listen);
  DPG_INFO("train: status page on http://" << flags.status_address << ":" << page->port() << "/"
           << (listen.token.empty() ? "" : " (bearer token: the cluster secret)"));
  return page;
}

// --report: the run's report, written at its end, failed or not.
void write_report(const TrainFlags& flags, const StatusPage* page) {
  if (page == nullptr || flags.report.empty()) return;
  write_status_report(flags.report, page->board());
  DPG_INFO("train: report written to " << flags.report);
}

// The run's facts (status_page.h): rank 0's first metrics line of the run (kind "facts", which
// `dpgossip report` reads) and, with a page, its board's.
Json facts_of(const TrainConfig& c, const std::string& run, const Peers& peers,
              const TransportPlan& links, const train::AlgoInfo& algo,
              const std::vector<train::GossipPhase>& graphs, const dp::PrivacyPlan& plan) {
  RunFacts f;
  f.run = run;
  f.config = &c;
  f.hosts = &peers.hosts;
  f.world = peers.world();
  f.links = &links;
  f.synchronous = !algo.asynchronous;
  f.phases = &graphs;
  f.plan = &plan;
  return status_facts(f);
}

// The page shows the run once its plan is made. Each peer's epsilon while the run goes on is
// the plan's at rank 0's step, where the plan's rates hold for every step so far: not after
// --balance-every changes them, nor on a resume (which charges replayed steps).
void start_status(StatusPage& page, const Json& facts, const TrainConfig& c,
                  const dp::PrivacyPlan& plan) {
  const bool plan_holds = c.dp && c.balance_every == 0 && !c.resume;
  // The plan by value: the page's thread may ask after the trainer (which holds the run's plan)
  // is gone, while an error unwinds.
  page.board().start(facts, [plan, plan_holds](long long step) -> Json {
    if (!plan_holds) return nullptr;
    return Json{{"data", plan.peer_epsilons_after(step)},
                {"messages", plan.peer_message_epsilons_after(step)}};
  });
}

// Keeps rank 0's status page up for --status-linger seconds after the run (a second SIGINT or
// SIGTERM ends the wait).
void linger(const TrainFlags& flags, StatusPage* page) {
  if (page == nullptr || flags.status_linger_s <= 0) return;
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::duration<double>(flags.status_linger_s);
  while (std::chrono::steady_clock::now() < end && !g_stop_requested.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void run_train(const CLI::App& cmd, const TrainFlags& flags) {
  set_activity(flags.config_file.empty() ? "reading the flags"
                                         : "reading " + flags.config_file + " and the flags");
  const TrainConfig c = merge(cmd, flags);
  // Before any thread or CUDA call: NCCL's exchange runs beside the model's kernels.
  if (c.transport == TransportMode::nccl) {
    if (const char* mode = device_backend("--transport nccl").eager_kernel_loading_for_nccl()) {
      DPG_WARN("train: CUDA_MODULE_LOADING=" << mode << " from the environment: a kernel loaded "
               "while an NCCL exchange waits on a dead peer may wait past the timeout "
               "(docs/GPU.md)");
    }
  }
  check_train_outputs(c);
  install_stop_handlers();
  set_activity("setting up the run (hosts, transport, trace)");
  const Peers peers = peers_for(c, flags);
  if (peers.world() > 1) log::set_origin(peers.rank);  // every later line names host, pid, rank
  check_noise_seed(c, peers.world());
  const std::unique_ptr<StatusPage> status = listen_status(flags, peers);  // rank 0's, or null
  // One voice per run: other ranks report only warnings and errors.
  if (peers.rank != 0 && log::level() > log::Level::warn) log::set_level(log::Level::warn);
  DPG_INFO("train: " << describe(c));
  const train::AlgoInfo& algo = train::algo_info(c.algo);
  std::vector<train::GossipPhase> phases;
  const std::string hosts_file = peers.hosts.name();
  if (algo.uses_graph && peers.world() > 1) {
    phases = gossip_phases(c, peers.world(), peers.hosts.topology, hosts_file);
  } else if (algo.uses_graph) {
    check_gossip_graphs(c, peers.hosts.topology, hosts_file);
  }
  // The timeline: this peer's part file from now on, its messages seen through a tracing
  // transport (off, nothing wraps and nothing is recorded).
  trace::Tracer tracer;
  open_trace(tracer, c.trace, peers.rank);
  const net::NetworkShape network = network_of(flags.emulation, peers.world());
  const std::vector<train::Slowdown> slowdown = slowdowns_of(flags.emulation, peers.world());
  Links links;
  if (peers.world() > 1) connect(links, c, flags, peers, algo, phases, network, tracer);
  collective::Communicator* comm = links.comm ? &*links.comm : nullptr;
  // Every peer's live figures to rank 0's page, over the links themselves (not their emulated
  // shape, nor counted in them).
  std::optional<StatusFeed> feed;
  if (links.counters) feed.emplace(*links.transport, *links.counters, status ? &status->board() : nullptr);
  train::RunInputs in;
  in.config = c;
  in.data = load_or_prepare(c, peers.rank, peers.world());
  if (comm && !slowdown.empty()) probe_slowdowns(*comm, c, in.data.train, slowdown);
  std::optional<Balanced> balanced;
  const bool balancing = c.balance == Balance::speed || c.balance_every > 0;
  if (balancing && c.resume) {
    fail(Code::invalid_argument,
         "train: --balance and --balance-every are not for a resumed run: it would measure other "
         "speeds, and so give the peers other rows than their checkpoints were written for");
  }
  if (c.balance_every > 0 && !data::prepared_whole(c.data) && c.secure_aggregation) {
    fail(Code::invalid_argument,
         "train: --balance-every over " + c.data + " (a shard per peer) changes the peers' "
         "sampling rates mid-run, and secure aggregation's grid and Skellam noise are sized for "
         "the rates at the start: prepare the folder whole, or balance at the start only "
         "(--balance speed)");
  }
  if (c.balance_every > 0 && data::prepared_whole(c.data)) {  // refused before anything is measured
    if (parse_device(c.device).cuda) {
      fail(Code::invalid_argument, "train: --balance-every: the rows of --device cuda stay on "
                                   "the GPU they were loaded to (balance at the start only)");
    }
  }
  if (comm && balancing) {
    set_activity("measuring this peer's speed for --balance speed");
    balanced = balance_peers(*comm, c, in.data, slowdown);
    in.peer_share = balanced->shares;
    in.rate_cap = balanced->rate_cap;
    set_activity("training");
  }
  if (balanced && c.balance_every > 0) {
    // The shape of a row (inputs and classes), for the calibration's model.
    data::Dataset shape;
    shape.cols = in.data.train.cols;
    shape.num_classes = in.data.train.num_classes;
    if (balanced->moved) {
      in.hooks.rebalance = [&c, &slowdown, &balanced, comm, shape](
                               int epoch, long long step) -> std::optional<data::Dataset> {
        if ((epoch - 1) % c.balance_every != 0) return std::nullopt;
        return rebalance_rows(*comm, c, slowdown, epoch, step, shape, *balanced);
      };
    } else {
      in.hooks.rerate = [&c, &slowdown, &balanced, comm, shape](
                            int epoch, long long step) -> std::optional<std::vector<double>> {
        if ((epoch - 1) % c.balance_every != 0) return std::nullopt;
        return rerate_peers(*comm, c, slowdown, epoch, step, shape, *balanced);
      };
    }
  }
  in.comm = comm;
  in.phases = std::move(phases);
  if (peers.world() > 1) in.host_of = host_ids(peers.hosts);
  in.tracer = &tracer;
  in.backends = device_backends(c);
  in.slowdown = slowdown;
  in.hooks.stop = &g_stop_requested;
  const bool reporter = peers.rank == 0;
  // Rank 0 writes the lines; a traced peer's timeline also carries its epsilon as it goes.
  in.reports_read = reporter || !c.trace.empty();
  if (status || feed) {
    in.hooks.step = [&status, &feed](long long t, std::span<const float>) {
      if (status) status->board().on_step(t);
      if (feed) feed->on_step(t);
    };
  }
  const std::vector<train::GossipPhase> graphs = in.phases;
  train::Trainer trainer(std::move(in));
  const int epochs = epoch_count(c);
  const std::string run = c.run_name.empty() ? default_run_name(c, peers.world()) : c.run_name;
  auto metrics_line = [&](Json line, const char* kind) {
    line["run"] = run;
    line["kind"] = kind;
    line["algo"] = to_string(c.algo);
    line["rank"] = 0;
    line["peers"] = peers.world();
    append_metrics(c.metrics, line);
    if (!status || line["kind"] == "facts" || line["kind"] == "peers") return;
    if (line["kind"] == "epoch") status->board().add_epoch(line);
    else if (line["kind"] == "consensus") status->board().add_consensus(line);
    else status->board().finish(line);
  };
  if (reporter) {
    const Json facts = facts_of(c, run, peers, links.plan, algo, graphs, trainer.plan());
    metrics_line(facts, "facts");
    if (status) start_status(*status, facts, c, trainer.plan());
  }
  train::TrainSummary summary;
  try {
    summary = trainer.run(
        [&](const train::EpochReport& r) {
          if (!reporter) return;
          std::cerr << train::progress_line(r, epochs) << std::endl;
          metrics_line(r.to_json(), "epoch");
        },
        [&](const train::ConsensusReport& r) {
          if (reporter) metrics_line(r.to_json(), "consensus");
        });
  } catch (const std::exception& e) {
    if (status) {
      status->board().fail(e.what());
      try {
        write_report(flags, status.get());
      } catch (const std::exception& w) {
        DPG_WARN("train: " << w.what());  // the run's own error is the one to report
      }
      linger(flags, status.get());
    }
    throw;
  }
  if (feed) feed->finish();  // on every peer before the trace's gather, which rank 0 would hold up
  finish_trace(tracer, comm, c.trace);
  if (!reporter) return;
  // The page keeps serving the end of the run for --status-linger seconds.
  struct Linger {
    const TrainFlags& flags;
    StatusPage* page;
    ~Linger() { linger(flags, page); }
  } keep_serving{flags, status.get()};
  if (summary.already_finished) {  // nothing ran: no metrics line, no summary of this call
    if (flags.json) {
      std::cout << Json{{"run", run}, {"already_finished", true}, {"steps", summary.steps},
                        {"epsilon", summary.epsilon}}.dump()
                << std::endl;
    } else {
      std::cout << "the run in " << c.checkpoint_dir << " had finished (" << summary.steps
                << " steps, epsilon " << summary.epsilon << "): nothing was trained" << std::endl;
    }
    return;
  }
  const dp::PrivacyPlan& plan = trainer.plan();
  Json s = summary.to_json(c, plan);
  s["run"] = run;
  if (balanced) s["balance"] = balanced->to_json();
  if (plan.peers > 1) s["peer_q"] = plan.peer_q;
  const bool stopped = summary.stopped_at >= 0;
  // Every peer's last figures from the status feed, before the summary that ends the run's lines.
  if (feed && status) metrics_line(Json{{"live", status->board().live()}}, "peers");
  if (!c.metrics.empty() || status) {
    Json line = s;
    line.erase("accountant");
    metrics_line(line, stopped ? "stopped" : "summary");
  }
  write_report(flags, status.get());
  if (flags.json) {
    std::cout << s.dump() << std::endl;
    return;
  }
  print_summary(c, summary, plan, s);
}

}  // namespace

void add_train(CLI::App& app) {
  auto f = std::make_shared<TrainFlags>();
  auto* cmd = app.add_subcommand("train", "Train with DP-SGD (defaults: the documented recipe)");
  cmd->add_option("--config", f->config_file, "JSON config file; flags override its fields");
  // One flag per config field, from the table; a bool field is a pair of switches.
  for (const ConfigField& field : config_fields()) f->flags.fields.push_back(&field);
  add_config_flags(*cmd, f->flags, [](const ConfigField& field) {
    return field.help + (field.is_bool ? " (overrides " + field.key + " in --config)" : "");
  });
  cmd->add_flag("--json", f->json, "print the summary as one JSON object");
  cmd->add_option("--hosts", f->hosts, "hosts file; this process is one of its peers");
  cmd->add_option("--rank", f->rank,
                  "this peer's rank (default: OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID "
                  "or RANK)");
  cmd->add_flag("--tls", f->tls,
                "TLS on every connection: the hosts file's tls.ca_file and each peer's "
                "certificate and key (docs/SECURITY.md); every peer must use it");
  add_network_flags(*cmd, f->emulation, true);
  cmd->add_option("--status-port", f->status_port,
                  "rank 0 serves a live status page, /api/status and /metrics on this port "
                  "(0: a free one, logged); docs/STATUS.md")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--status-address", f->status_address,
                  "the status page's address (default 127.0.0.1); another one needs the hosts "
                  "file's secret, which clients send as a bearer token")
      ->needs("--status-port");
  cmd->add_option("--status-linger", f->status_linger_s,
                  "seconds rank 0 keeps serving the status page once the run has ended (a "
                  "peer without the page ignores it, so that every peer takes the same flags)")
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--report", f->report,
                  "rank 0 writes the run's report here at its end: one self-contained HTML file "
                  "(the status page with the run's final figures, config and environment)");
  cmd->callback([cmd, f] { run_train(*cmd, *f); });
}

}  // namespace dpg::app
