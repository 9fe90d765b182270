// `dpgossip privacy`: epsilon of DP-SGD with Poisson sampling (PLD or RDP accountant), or the
// smallest noise multiplier that meets a target epsilon. See docs/PRIVACY.md. With --topology,
// also the pairwise network epsilons of gossip on that graph (dp/network_dp.h, docs/GOSSIP.md).
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "apps/commands.h"
#include "apps/gossip_setup.h"
#include "apps/parse.h"
#include "dp/accountant.h"
#include "dp/network_dp.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "topology/generators.h"

namespace dpg::app {
namespace {

struct PrivacyFlags {
  double sample_rate = 0;
  double noise_multiplier = 0;
  double target_epsilon = 0;
  long long steps = 0;
  double epochs = 0;
  double delta = 0;
  std::string accountant = "pld";
  bool json = false;
  // Pairwise network DP of gossip: the graph as `dpgossip train` names it.
  std::string topology;
  int peers = 0;
  std::string topology_weights = "metropolis";
  int topology_degree = 0;
  std::uint64_t topology_seed = 0;
  CLI::Option* topology_opt = nullptr;
  CLI::Option* peers_opt = nullptr;
  CLI::Option* sample_rate_opt = nullptr;
  CLI::Option* noise_multiplier_opt = nullptr;
  CLI::Option* target_epsilon_opt = nullptr;
  CLI::Option* steps_opt = nullptr;
  CLI::Option* epochs_opt = nullptr;
  CLI::Option* delta_opt = nullptr;
};

std::string fmt(double v) {
  std::ostringstream os;
  os << std::setprecision(6) << v;
  return os.str();
}

// Shortest text that reads back as the same double, for error messages.
std::string exact(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

[[noreturn]] void bad_flag(const std::string& message) { fail(Code::invalid_argument, message); }

bool given(const CLI::Option* opt) { return opt->count() > 0; }

// Everything is checked here, before any computation, so that each message names its flag.
void validate(const PrivacyFlags& f) {
  if (!given(f.sample_rate_opt))
    bad_flag("--sample-rate is required (the Poisson sampling rate: expected batch / dataset size)");
  if (!(f.sample_rate > 0.0 && f.sample_rate <= 1.0))
    bad_flag("--sample-rate must be in (0, 1], got " + exact(f.sample_rate));
  if (given(f.noise_multiplier_opt) == given(f.target_epsilon_opt))
    bad_flag("give exactly one of --noise-multiplier and --target-epsilon");
  if (given(f.noise_multiplier_opt) &&
      !(f.noise_multiplier > 0.0 && std::isfinite(f.noise_multiplier)))
    bad_flag("--noise-multiplier must be finite and > 0, got " + exact(f.noise_multiplier));
  if (given(f.target_epsilon_opt) && !(f.target_epsilon > 0.0 && std::isfinite(f.target_epsilon)))
    bad_flag("--target-epsilon must be finite and > 0, got " + exact(f.target_epsilon));
  if (given(f.steps_opt) == given(f.epochs_opt))
    bad_flag("give exactly one of --steps and --epochs");
  if (given(f.steps_opt) && (f.steps < 1 || f.steps > 1000000000000000LL))
    bad_flag("--steps must be in [1, 1e15], got " + std::to_string(f.steps));
  if (given(f.epochs_opt) && !(f.epochs > 0.0 && std::isfinite(f.epochs)))
    bad_flag("--epochs must be finite and > 0, got " + exact(f.epochs));
  if (!given(f.delta_opt)) bad_flag("--delta is required (e.g. 1e-5, below 1 / dataset size)");
  if (!(f.delta > 0.0 && f.delta < 1.0))
    bad_flag("--delta must be in (0, 1), got " + exact(f.delta));
  if (given(f.peers_opt) && !given(f.topology_opt))
    bad_flag("--peers applies only with --topology (the gossip graph)");
  if (given(f.topology_opt) && !is_graph_file(f.topology) && !given(f.peers_opt))
    bad_flag("--topology " + f.topology + " needs --peers");
  if (given(f.peers_opt) && (f.peers < 1 || f.peers > dp::kNetworkDpMaxPeers))
    bad_flag("--peers must be in [1, " + std::to_string(dp::kNetworkDpMaxPeers) + "], got " +
             std::to_string(f.peers));
}

// The one mixing matrix of --topology, built as `dpgossip train` builds it (gossip_setup.h); a
// time-varying period is refused (dp/network_dp.h).
topology::Topology gossip_graph(const PrivacyFlags& f) {
  TrainConfig c;
  for (const ConfigField& field : config_fields()) {
    if (field.key != "topology_weights") continue;
    try {
      field.parse(c, f.topology_weights);
    } catch (const Error& e) {
      bad_flag("--topology-weights: " + std::string(e.what()));
    }
  }
  c.topology_degree = f.topology_degree;
  c.topology_seed = f.topology_seed;
  const std::vector<topology::Topology> period =
      gossip_graphs(f.topology, c, f.peers, "--topology " + f.topology);
  if (given(f.peers_opt) && f.peers != period.front().peers())
    bad_flag("--peers " + std::to_string(f.peers) + " but --topology " + f.topology + " has " +
             std::to_string(period.front().peers()) + " peers");
  if (period.size() != 1)
    bad_flag("--topology " + f.topology + ": a time-varying graph (a period of " +
             std::to_string(period.size()) +
             " matrices) is not covered by the pairwise network accountant; give a static graph");
  return period.front();
}

struct NetworkReport {
  std::string label;
  int peers = 0;
  std::vector<int> distance;       // n x n
  std::vector<double> epsilon;     // n x n
  std::vector<double> sigma_eff;   // n x n
  std::vector<dp::DistanceRow> rows;  // distance 1, 2, ...
};

NetworkReport network_report(const PrivacyFlags& f, dp::AccountantKind kind, double sigma,
                             long long steps) {
  const topology::Topology t = gossip_graph(f);
  NetworkReport r;
  r.label = t.name();
  r.peers = t.peers();
  const auto& w = t.matrix();
  r.distance = dp::graph_distances(w, r.peers);
  r.sigma_eff = dp::pairwise_noise_multipliers(w, r.peers, sigma);
  r.epsilon = dp::pairwise_epsilons(w, r.peers, f.sample_rate, sigma, steps, f.delta, kind);
  r.rows = dp::rows_by_distance(r.distance, r.sigma_eff, r.peers, f.sample_rate, sigma, steps,
                                f.delta, kind);
  return r;
}

nlohmann::json matrix_json(const std::vector<double>& m, int n) {
  nlohmann::json rows = nlohmann::json::array();
  for (int i = 0; i < n; ++i)
    rows.push_back(std::vector<double>(m.begin() + static_cast<std::ptrdiff_t>(i) * n,
                                       m.begin() + static_cast<std::ptrdiff_t>(i + 1) * n));
  return rows;
}

// What the pairwise figures assume, beside every one of them (docs/GOSSIP.md).
constexpr const char* kPairwiseScope =
    "a bound for gossip of a model linear in its gradients (docs/GOSSIP.md's derivation, after "
    "Cyffers and Bellet 2022 and Muffliato, Cyffers et al. 2022): one fixed graph, "
    "honest-but-curious peers without collusion, a constant learning rate, weight decay 0; not "
    "a guarantee for DP-SGD on a non-linear model such as the MLP dpgossip trains, whose "
    "guarantee is the local epsilon";

nlohmann::json network_json(const NetworkReport& r, double local) {
  nlohmann::json by = nlohmann::json::array();
  for (const auto& row : r.rows)
    by.push_back({{"distance", row.distance},
                  {"pairs", row.pairs},
                  {"worst_epsilon", row.worst_epsilon},
                  {"least_noise_multiplier", row.least_sigma}});
  nlohmann::json dist = nlohmann::json::array();
  for (int i = 0; i < r.peers; ++i)
    dist.push_back(std::vector<int>(r.distance.begin() + static_cast<std::ptrdiff_t>(i) * r.peers,
                                    r.distance.begin() + static_cast<std::ptrdiff_t>(i + 1) * r.peers));
  return {{"topology", r.label},
          {"peers", r.peers},
          {"assumptions", kPairwiseScope},
          {"local_epsilon", local},
          {"by_distance", by},
          {"distance", dist},
          {"epsilon", matrix_json(r.epsilon, r.peers)},
          {"noise_multiplier", matrix_json(r.sigma_eff, r.peers)}};
}

void print_network(const NetworkReport& r, double local) {
  std::cout << "Pairwise network DP of gossip on " << r.label << " (" << r.peers
            << " peers): u's data in the models peer v receives\n  " << kPairwiseScope
            << "\n";
  std::cout << "  distance  pairs  worst epsilon  local epsilon  least sigma_eff\n";
  for (const auto& row : r.rows)
    std::cout << "  " << std::setw(8) << row.distance << "  " << std::setw(5) << row.pairs << "  "
              << std::setw(13) << fmt(row.worst_epsilon) << "  " << std::setw(13) << fmt(local)
              << "  " << std::setw(15) << fmt(row.least_sigma) << "\n";
}

// What the chosen accountant says about (q, sigma, steps): the epsilon reported, and for PLD
// the optimistic estimate below it, for RDP the best order.
struct Report {
  dp::PrivacySpent spent;
  double optimistic = 0;  // PLD only
  double interval = 0;    // PLD only: the grid interval used
  bool edge = false;      // RDP only: the best order is at the edge of the grid
};

Report evaluate(const PrivacyFlags& f, dp::AccountantKind kind, double sigma, long long steps) {
  Report r;
  if (kind == dp::AccountantKind::pld) {
    // What epsilon_for(..., pld) reports, with the optimistic estimate beside it.
    const dp::PoissonGaussian run{f.sample_rate, sigma, steps};
    const dp::PldResult upper = dp::pld_epsilon({&run, 1}, f.delta, dp::PldEstimate::pessimistic);
    const dp::PldResult lower = dp::pld_epsilon({&run, 1}, f.delta, dp::PldEstimate::optimistic);
    r.spent = {upper.value, std::nan("")};
    r.optimistic = lower.value;
    r.interval = std::max(upper.interval, lower.interval);
  } else {
    r.spent = dp::epsilon_for(f.sample_rate, sigma, steps, f.delta, kind);
    r.edge = dp::at_grid_edge(dp::default_orders(), r.spent.best_alpha);
  }
  return r;
}

void run_privacy(const PrivacyFlags& f) {
  validate(f);
  const dp::AccountantKind kind = dp::parse_accountant_kind(f.accountant);
  const long long steps =
      given(f.steps_opt) ? f.steps : dp::steps_for_epochs(f.epochs, f.sample_rate);
  double sigma = f.noise_multiplier;
  if (given(f.target_epsilon_opt)) {
    try {
      sigma = dp::calibrate_noise_multiplier(f.sample_rate, steps, f.delta, f.target_epsilon, kind);
    } catch (const Error& e) {
      fail(e.code(), std::string("--target-epsilon: ") + e.what());
    }
  }
  const Report r = evaluate(f, kind, sigma, steps);
  const bool pld = kind == dp::AccountantKind::pld;
  if (r.edge)
    DPG_WARN("privacy: the best RDP order (alpha = "
             << r.spent.best_alpha << ") is at the edge of the order grid [1.1, 63]; the true "
             << "epsilon may be smaller than reported (the bound stays valid)");

  std::optional<NetworkReport> net;
  if (given(f.topology_opt)) net = network_report(f, kind, sigma, steps);

  if (f.json) {
    nlohmann::json j = {{"accountant", f.accountant},
                        {"epsilon", r.spent.epsilon},
                        {"noise_multiplier", sigma},
                        {"sample_rate", f.sample_rate},
                        {"steps", steps},
                        {"delta", f.delta}};
    if (pld) {
      j["epsilon_optimistic"] = r.optimistic;
      j["interval"] = r.interval;
    } else {
      j["best_alpha"] = r.spent.best_alpha;
      j["best_alpha_at_grid_edge"] = r.edge;
    }
    if (given(f.epochs_opt)) j["epochs"] = f.epochs;
    if (given(f.target_epsilon_opt)) j["target_epsilon"] = f.target_epsilon;
    if (net) j["network"] = network_json(*net, r.spent.epsilon);
    std::cout << j.dump() << "\n";
    return;
  }
  std::cout << "Poisson-subsampled Gaussian, " << (pld ? "PLD" : "RDP")
            << " accountant (add/remove adjacency)\n";
  std::cout << "  sample rate        " << fmt(f.sample_rate) << "\n";
  if (given(f.epochs_opt))
    std::cout << "  steps              " << steps << "  (ceil(" << fmt(f.epochs) << " epochs / "
              << fmt(f.sample_rate) << "))\n";
  else
    std::cout << "  steps              " << steps << "\n";
  std::cout << "  delta              " << fmt(f.delta) << "\n";
  if (given(f.target_epsilon_opt)) {
    std::cout << "  target epsilon     " << fmt(f.target_epsilon) << "\n";
    std::cout << "  noise multiplier   " << fmt(sigma) << "  (smallest meeting the target)\n";
  } else {
    std::cout << "  noise multiplier   " << fmt(sigma) << "\n";
  }
  std::cout << "  epsilon            " << fmt(r.spent.epsilon) << (pld ? "  (upper bound)" : "")
            << "\n";
  if (pld) {
    std::cout << "  optimistic         " << fmt(r.optimistic)
              << "  (the true epsilon lies between; grid " << fmt(r.interval) << ")\n";
  } else {
    std::cout << "  best RDP order     " << fmt(r.spent.best_alpha)
              << (r.edge ? "  (grid edge)" : "") << "\n";
  }
  if (net) print_network(*net, r.spent.epsilon);
}

std::string kinds_list() {
  std::string s;
  for (const auto& k : topology::kinds()) s += (s.empty() ? "" : ", ") + k;
  return s;
}

}  // namespace

void add_privacy(CLI::App& app) {
  auto flags = std::make_shared<PrivacyFlags>();
  CLI::App* cmd = app.add_subcommand(
      "privacy",
      "Epsilon of DP-SGD with Poisson sampling (PLD, or RDP as Opacus), or with "
      "--target-epsilon the smallest noise multiplier that meets a target");
  flags->sample_rate_opt = cmd->add_option("--sample-rate", flags->sample_rate,
                                           "Poisson sampling rate q in (0, 1]");
  flags->noise_multiplier_opt = cmd->add_option(
      "--noise-multiplier", flags->noise_multiplier,
      "noise standard deviation / clipping norm (sigma > 0)");
  flags->target_epsilon_opt =
      cmd->add_option("--target-epsilon", flags->target_epsilon,
                      "instead of --noise-multiplier: find the smallest one meeting this epsilon");
  flags->steps_opt = cmd->add_option("--steps", flags->steps, "number of steps (>= 1)");
  flags->epochs_opt = cmd->add_option("--epochs", flags->epochs,
                                      "instead of --steps: steps = ceil(epochs / sample rate)");
  flags->delta_opt = cmd->add_option("--delta", flags->delta, "delta in (0, 1)");
  cmd->add_option("--accountant", flags->accountant,
                  "pld (privacy loss distributions: tight, the default) or rdp (Renyi DP, as "
                  "Opacus's RDPAccountant)")
      ->check(CLI::IsMember({"pld", "rdp"}));
  cmd->add_flag("--json", flags->json, "print one JSON object instead of text");
  flags->topology_opt = cmd->add_option(
      "--topology", flags->topology,
      "also the pairwise network epsilons of gossip on this graph: a kind (" + kinds_list() +
          ") or a JSON graph file, as `dpgossip train --topology`");
  flags->peers_opt = cmd->add_option("--peers", flags->peers, "with --topology: number of peers");
  cmd->add_option("--topology-weights", flags->topology_weights,
                  "with --topology: metropolis (default), uniform or lazy");
  cmd->add_option("--topology-degree", flags->topology_degree,
                  "with --topology random-regular: the degree");
  cmd->add_option("--topology-seed", flags->topology_seed,
                  "with --topology random-regular: the seed")
      ->check(seed_check());
  cmd->callback([flags] { run_privacy(*flags); });
}

}  // namespace dpg::app
