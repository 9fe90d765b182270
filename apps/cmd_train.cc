// dpgossip train: config from a JSON file, every field overridable by a flag; prepares
// Fashion-MNIST first when the data folder has no manifest yet. With --algo allreduce or gossip
// and a hosts file it is one peer of a run over TCP; rank 0 reports and writes the metrics.
#include <ctime>
#include <optional>
#include <filesystem>
#include <set>
#include <fstream>
#include <iostream>
#include <memory>

#include "apps/commands.h"
#include "apps/gossip_setup.h"
#include "apps/parse.h"
#include "runtime/core/error.h"
#include "runtime/core/hash.h"
#include "runtime/core/json_io.h"
#include "runtime/core/log.h"
#include "runtime/core/train_config.h"
#include "runtime/collective/communicator.h"
#include "runtime/data/dataset.h"
#include "runtime/data/peer_data.h"
#include "runtime/net/hosts.h"
#include "runtime/net/tcp/tcp_transport.h"
#include "runtime/train/algorithm.h"
#include "runtime/train/trainer.h"

namespace dpg::app {
namespace {

struct TrainFlags {
  std::string config_file;
  TrainConfig c;        // holds the flag values; only flags actually given override the file
  std::string hidden;
  bool dp = false;     // --dp: turn DP back on over a config file's "dp": false
  bool no_dp = false;  // --no-dp
  bool json = false;
  std::string hosts;            // hosts file: this process is one peer of it
  std::optional<int> rank;      // default: from the launcher's environment
};

// Applies each flag that was given on the command line over the config read from the file.
TrainConfig merge(const CLI::App& cmd, const TrainFlags& f) {
  TrainConfig c = f.config_file.empty() ? TrainConfig{}
                                         : train_config_from_json(read_json_file(f.config_file),
                                                                  f.config_file + ":");
  auto given = [&](const char* flag) { return cmd.get_option(flag)->count() > 0; };
  const TrainConfig& v = f.c;
  if (given("--data")) c.data = v.data;
  if (given("--hidden")) c.hidden = parse_int_list(f.hidden, "--hidden");
  if (given("--activation")) c.activation = v.activation;
  if (given("--epochs")) c.epochs = v.epochs;
  if (given("--batch-size")) c.batch_size = v.batch_size;
  if (given("--sampling")) c.sampling = v.sampling;
  if (given("--lr")) c.lr = v.lr;
  if (given("--momentum")) c.momentum = v.momentum;
  if (given("--weight-decay")) c.weight_decay = v.weight_decay;
  if (given("--lr-schedule")) c.lr_schedule = v.lr_schedule;
  if (given("--ema-decay")) c.ema_decay = v.ema_decay;
  if (given("--clip-norm")) c.clip_norm = v.clip_norm;
  if (given("--noise-multiplier")) c.noise_multiplier = v.noise_multiplier;
  if (given("--noise-multiplier") && given("--target-epsilon")) {
    fail(Code::invalid_argument,
         "train: give --noise-multiplier or --target-epsilon, not both");
  }
  if (given("--target-epsilon")) {
    c.target_epsilon = v.target_epsilon;
    c.noise_multiplier = 0;  // calibrate to the new target
  }
  if (given("--delta")) c.delta = v.delta;
  if (given("--seed")) c.seed = v.seed;
  if (given("--noise-seed")) c.noise_seed = v.noise_seed;
  if (given("--threads")) c.threads = v.threads;
  if (given("--algo")) c.algo = v.algo;
  if (given("--noise-mode")) c.noise_mode = v.noise_mode;
  if (given("--timeout-s")) c.timeout_s = v.timeout_s;
  if (given("--metrics")) c.metrics = v.metrics;
  if (given("--topology")) c.topology = v.topology;
  if (given("--topology-weights")) c.topology_weights = v.topology_weights;
  if (given("--topology-degree")) c.topology_degree = v.topology_degree;
  if (given("--topology-seed")) c.topology_seed = v.topology_seed;
  if (given("--topology-schedule")) c.topology_schedule = v.topology_schedule;
  if (given("--init")) c.init = v.init;
  if (given("--metrics-every")) c.metrics_every = v.metrics_every;
  if (given("--metrics-eval-rows")) c.metrics_eval_rows = v.metrics_eval_rows;
  if (given("--run-name")) c.run_name = v.run_name;
  if (f.dp && f.no_dp) fail(Code::invalid_argument, "train: give --dp or --no-dp, not both");
  if (f.dp) c.dp = true;
  if (f.no_dp) c.dp = false;
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
  return data::load_for_peer(c.data, rank, world, c.seed);
}

// The peers of this run: the hosts file for --algo allreduce or gossip, or this process alone.
struct Peers {
  net::HostsFile hosts;
  int rank = 0;
  int world() const { return hosts.peers.empty() ? 1 : hosts.world(); }
};

Peers peers_for(const TrainConfig& c, const TrainFlags& f) {
  Peers p;
  if (c.algo == "single") {
    if (!f.hosts.empty() || f.rank) {
      fail(Code::invalid_argument, "train: --hosts and --rank need --algo allreduce or gossip");
    }
    return p;
  }
  if (f.hosts.empty()) {
    if (f.rank && *f.rank != 0) {
      fail(Code::invalid_argument, "train: --rank without --hosts (give the hosts file)");
    }
    return p;  // an all-reduce (or gossip) among one peer
  }
  p.hosts = net::load_hosts(f.hosts);
  p.rank = net::resolve_rank(f.rank, p.hosts.world());
  return p;
}

void append_metrics(const std::string& path, const Json& line) {
  if (path.empty()) return;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  std::ofstream out(path, std::ios::app);
  if (!out) fail(Code::failed_precondition, "metrics: cannot append to " + path);
  out << line.dump() << "\n";
}

// "gossip-ring-n8-20261121-101500": algorithm, graph, peers and the start time.
std::string default_run_name(const TrainConfig& c, int world) {
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y%m%d-%H%M%S", std::localtime(&now));
  std::string graph = c.algo == "gossip" ? "-" + std::filesystem::path(c.topology).stem().string()
                                         : "";
  if (c.algo == "gossip" && !c.topology_schedule.empty()) graph += "-swap";
  return c.algo + graph + "-n" + std::to_string(world) + "-" + when;
}

void run_train(const CLI::App& cmd, const TrainFlags& flags) {
  const TrainConfig c = merge(cmd, flags);
  const Peers peers = peers_for(c, flags);
  // One voice per run: other ranks report only warnings and errors.
  if (peers.rank != 0 && log::level() > log::Level::warn) log::set_level(log::Level::warn);
  const train::AlgoInfo& algo = train::algo_info(c.algo);
  std::vector<train::GossipPhase> phases;
  if (algo.uses_graph && peers.world() > 1) {
    phases = gossip_phases(c, peers.world(), peers.hosts.topology);
  }
  std::optional<net::TcpTransport> transport;
  std::optional<collective::Communicator> comm;
  if (peers.world() > 1) {
    net::TcpOptions t;
    t.timeout = std::chrono::milliseconds(static_cast<long long>(c.timeout_s * 1000));
    t.connect_timeout = t.timeout;
    // The hosts file's topology is part of what the peers must share when a run uses it.
    t.config_hash = shared_settings_hash(c) ^ (peers.hosts.topology.is_null()
                                                   ? 0
                                                   : fnv1a64(peers.hosts.topology.dump()));
    // An algorithm that overlaps communication with computation needs an I/O thread.
    t.progress_thread = algo.overlaps(c);
    const collective::Options copt;
    // The collectives' peers (the initial broadcast, evaluation and metrics), plus the
    // algorithm's own (gossip: the neighbours of every graph of the run).
    std::set<int> talk_to;
    for (int p : collective::peers_needed(peers.rank, peers.world(), copt)) talk_to.insert(p);
    for (int p : algo.peers(c, peers.rank, peers.world(), phases)) talk_to.insert(p);
    transport.emplace(peers.hosts, peers.rank, std::vector<int>(talk_to.begin(), talk_to.end()),
                      t);
    comm.emplace(*transport, copt);
  }
  train::Trainer trainer(c, load_or_prepare(c, peers.rank, peers.world()),
                         comm ? &*comm : nullptr, std::move(phases));
  const bool reporter = peers.rank == 0;
  const int epochs = static_cast<int>(std::ceil(c.epochs - 1e-9));
  const std::string run = c.run_name.empty() ? default_run_name(c, peers.world()) : c.run_name;
  auto metrics_line = [&](Json line, const char* kind) {
    line["run"] = run;
    line["kind"] = kind;
    line["algo"] = c.algo;
    line["rank"] = 0;
    line["peers"] = peers.world();
    append_metrics(c.metrics, line);
  };
  const auto summary = trainer.run(
      [&](const train::EpochReport& r) {
        if (!reporter) return;
        std::cerr << train::progress_line(r, epochs) << std::endl;
        metrics_line(r.to_json(), "epoch");
      },
      [&](const train::ConsensusReport& r) {
        if (reporter) metrics_line(r.to_json(), "consensus");
      });
  if (!reporter) return;
  const dp::PrivacyPlan& plan = trainer.plan();
  Json s = summary.to_json(c, plan);
  s["run"] = run;
  if (!c.metrics.empty()) {
    Json line = s;
    line.erase("accountant");
    metrics_line(line, "summary");
  }
  if (flags.json) {
    std::cout << s.dump() << std::endl;
    return;
  }
  std::cout << "test accuracy " << 100 * summary.test_accuracy << "%, epsilon "
            << (c.dp ? std::to_string(summary.epsilon) : std::string("inf (no DP)"))
            << " at delta " << c.delta;
  if (c.dp && plan.peers > 1) {
    std::cout << " for the model (" << c.algo << ", " << plan.noise_mode
              << " noise; the worst peer's data); epsilon " << summary.message_epsilon
              << " for any one peer's messages";
  }
  if (s.contains("rho") && s["topology"] != c.algo) {
    std::cout << " (graph " << s["topology"].get<std::string>() << ", rho "
              << s["rho"].get<double>() << ")";
  }
  std::cout << ", " << summary.peers << " peer" << (summary.peers > 1 ? "s" : "")
            << ", noise multiplier " << plan.model_sigma << ", " << summary.steps << " steps, "
            << summary.samples_per_second << " samples/s\n";
}

}  // namespace

void add_train(CLI::App& app) {
  auto f = std::make_shared<TrainFlags>();
  auto* cmd = app.add_subcommand("train", "Train with DP-SGD (defaults: the documented recipe)");
  TrainConfig& c = f->c;
  const TrainConfig d;
  cmd->add_option("--config", f->config_file, "JSON config file; flags override its fields");
  cmd->add_option("--data", c.data, "prepared data folder (default " + d.data + ")");
  cmd->add_option("--hidden", f->hidden, "hidden widths, e.g. 256,256");
  cmd->add_option("--activation", c.activation, "relu or tanh (default " + d.activation + ")");
  cmd->add_option("--epochs", c.epochs, "epochs");
  cmd->add_option("--batch-size", c.batch_size, "expected batch size (Poisson: q * n)");
  cmd->add_option("--sampling", c.sampling, "poisson or shuffle");
  cmd->add_option("--lr", c.lr, "learning rate");
  cmd->add_option("--momentum", c.momentum, "SGD momentum");
  cmd->add_option("--weight-decay", c.weight_decay, "L2 weight decay");
  cmd->add_option("--lr-schedule", c.lr_schedule, "constant or cosine");
  cmd->add_option("--ema-decay", c.ema_decay, "parameter average decay (0: off)");
  cmd->add_option("--clip-norm", c.clip_norm, "per-example clip norm C");
  cmd->add_option("--noise-multiplier", c.noise_multiplier, "sigma (noise sd is sigma * C)");
  cmd->add_option("--target-epsilon", c.target_epsilon, "calibrate sigma to this epsilon");
  cmd->add_option("--delta", c.delta, "delta");
  cmd->add_option("--seed", c.seed, "seed for the initialisation");
  cmd->add_option("--noise-seed", c.noise_seed,
                  "seed for sampling and noise (default: secret, from the OS; set only to "
                  "reproduce a run, since it reveals the noise)");
  cmd->add_option("--threads", c.threads, "BLAS threads");
  cmd->add_option("--metrics", c.metrics, "JSON-lines metrics file to append to ('' = none)");
  cmd->add_flag("--dp", f->dp, "DP-SGD (the default; overrides \"dp\": false in --config)");
  cmd->add_flag("--no-dp", f->no_dp, "plain SGD: no clipping, no noise");
  cmd->add_flag("--json", f->json, "print the summary as one JSON object");
  cmd->add_option("--algo", c.algo,
                  "single, allreduce (data-parallel over the hosts file) or gossip (D-PSGD)");
  cmd->add_option("--topology", c.topology,
                  "gossip: graph kind (ring, torus, hypercube, exponential, "
                  "symmetric-exponential, one-peer-exponential, complete, star, random-regular), "
                  "a .json graph file, or hosts (the hosts file's topology; default " +
                      d.topology + ")");
  cmd->add_option("--topology-weights", c.topology_weights, "metropolis, uniform or lazy");
  cmd->add_option("--topology-degree", c.topology_degree, "random-regular: the degree");
  cmd->add_option("--topology-seed", c.topology_seed, "random-regular: the seed");
  cmd->add_option("--topology-schedule", c.topology_schedule,
                  "gossip: later graphs, e.g. epoch:5=exponential,step:300=ring");
  cmd->add_option("--init", c.init,
                  "gossip: same (rank 0's model everywhere) or independent (seed + rank)");
  cmd->add_option("--metrics-every", c.metrics_every,
                  "gossip: consensus distance every K steps (0: off)");
  cmd->add_option("--metrics-eval-rows", c.metrics_eval_rows,
                  "gossip: test rows each K-step metrics line evaluates the models on (0: none)");
  cmd->add_option("--run-name", c.run_name, "the run id of the metrics lines");
  cmd->add_option("--noise-mode", c.noise_mode,
                  "allreduce: distributed (sum carries the central noise) or local (every "
                  "message is DP on its own); gossip is always local");
  cmd->add_option("--timeout-s", c.timeout_s, "timeout of every network wait, in seconds");
  cmd->add_option("--hosts", f->hosts, "hosts file; this process is one of its peers");
  cmd->add_option("--rank", f->rank,
                  "this peer's rank (default: OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID "
                  "or RANK)");
  cmd->callback([cmd, f] { run_train(*cmd, *f); });
}

}  // namespace dpg::app
