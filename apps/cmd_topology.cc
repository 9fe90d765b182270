// `dpgossip topology`: build a named graph (or read one from JSON), validate its mixing matrices
// and report degrees, symmetry and how fast gossip on it averages. See docs/TOPOLOGY.md.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/parse.h"
#include "runtime/core/error.h"
#include "runtime/core/json_io.h"
#include "topology/generators.h"
#include "topology/spectrum.h"

namespace dpg::app {
namespace {

namespace topo = dpg::topology;

// Per-peer lists are printed in full up to this many peers, as min / max beyond.
constexpr int kListPeers = 16;

struct TopologyFlags {
  std::string kind;
  std::string from;
  int peers = 0;
  std::string weights = "metropolis";
  int degree = 0;
  std::uint64_t seed = 0;
  bool json = false;
  bool matrix = false;
  CLI::Option* kind_opt = nullptr;
  CLI::Option* from_opt = nullptr;
  CLI::Option* peers_opt = nullptr;
  CLI::Option* degree_opt = nullptr;
  CLI::Option* seed_opt = nullptr;
};

bool given(const CLI::Option* opt) { return opt->count() > 0; }

[[noreturn]] void bad_flag(const std::string& message) {
  fail(Code::invalid_argument, "topology: " + message);
}

std::string fmt(double v) {
  std::ostringstream os;
  os << std::setprecision(6) << v;
  return os.str();
}

// Degrees per round; over a period, each peer's largest in any round.
struct Degrees {
  std::vector<int> in, out, contacts;
};

Degrees degrees_of(const std::vector<topo::Topology>& period) {
  const int n = period.front().peers();
  Degrees d{std::vector<int>(n, 0), std::vector<int>(n, 0), std::vector<int>(n, 0)};
  for (const auto& t : period) {
    const auto in = t.in_degrees(), out = t.out_degrees();
    for (int i = 0; i < n; ++i) {
      d.in[i] = std::max(d.in[i], in[i]);
      d.out[i] = std::max(d.out[i], out[i]);
    }
  }
  // Schedule::peers_of for every rank, in one pass: O(n^2) per matrix rather than O(n^3).
  std::vector<char> linked(static_cast<std::size_t>(n) * n, 0);
  for (const auto& t : period)
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        if (i != j && t.weight(i, j) > 0)
          linked[static_cast<std::size_t>(i) * n + j] =
              linked[static_cast<std::size_t>(j) * n + i] = 1;
  for (int i = 0; i < n; ++i)
    d.contacts[i] =
        static_cast<int>(std::count(linked.begin() + static_cast<std::ptrdiff_t>(i) * n,
                                    linked.begin() + static_cast<std::ptrdiff_t>(i + 1) * n, 1));
  return d;
}

std::string describe(const std::vector<int>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  if (*lo == *hi) return std::to_string(*lo) + " for every peer";
  if (static_cast<int>(v.size()) > kListPeers)
    return "min " + std::to_string(*lo) + ", max " + std::to_string(*hi);
  std::string s;
  for (int x : v) s += (s.empty() ? "" : " ") + std::to_string(x);
  return s;
}

Json degrees_json(const Degrees& d) {
  Json j = {{"in", d.in}, {"out", d.out}, {"contacts", d.contacts}};
  for (const auto& [name, v] :
       {std::pair{"in", &d.in}, {"out", &d.out}, {"contacts", &d.contacts}}) {
    j[std::string(name) + "_min"] = *std::min_element(v->begin(), v->end());
    j[std::string(name) + "_max"] = *std::max_element(v->begin(), v->end());
  }
  return j;
}

Json matrices_json(const std::vector<topo::Topology>& period) {
  Json all = Json::array();
  for (const auto& t : period) {
    Json rows = Json::array();
    for (int i = 0; i < t.peers(); ++i) {
      std::vector<double> row(t.matrix().begin() + static_cast<std::ptrdiff_t>(i) * t.peers(),
                              t.matrix().begin() + static_cast<std::ptrdiff_t>(i + 1) * t.peers());
      rows.push_back(row);
    }
    all.push_back(rows);
  }
  return all;
}

void print_matrices(const std::vector<topo::Topology>& period) {
  for (std::size_t k = 0; k < period.size(); ++k) {
    const auto& t = period[k];
    std::cout << "  W" << (period.size() > 1 ? " (round " + std::to_string(k) + ")" : "") << ":\n";
    for (int i = 0; i < t.peers(); ++i) {
      std::cout << "   ";
      for (int j = 0; j < t.peers(); ++j)
        std::cout << " " << std::fixed << std::setprecision(4) << t.weight(i, j);
      std::cout << std::defaultfloat << "\n";
    }
  }
}

void run_topology(const TopologyFlags& f) {
  if (given(f.kind_opt) == given(f.from_opt)) bad_flag("give exactly one of --kind and --from");
  if (given(f.kind_opt) && !given(f.peers_opt)) bad_flag("--kind needs --peers");
  if (given(f.degree_opt) && f.kind != "random-regular")
    bad_flag("--degree applies only to --kind random-regular");
  if (given(f.seed_opt) && f.kind != "random-regular")
    bad_flag("--seed applies only to --kind random-regular");
  if (given(f.degree_opt) && f.degree < 1)
    bad_flag("--degree must be >= 1, got " + std::to_string(f.degree));

  std::vector<topo::Topology> period;
  std::string kind = f.kind, weights = f.weights, label = f.kind;
  if (given(f.from_opt)) {
    period = topo::from_json(read_json_file(f.from), f.from + ":", f.weights);
    if (given(f.peers_opt) && f.peers != period.front().peers())
      bad_flag("--peers " + std::to_string(f.peers) + " but " + f.from + " has " +
               std::to_string(period.front().peers()) + " peers");
    kind = "file";
    weights = "file";
    label = "file:" + f.from;
  } else {
    period = topo::make({f.kind, f.peers, f.weights, f.degree, f.seed});
    if (f.kind == "one-peer-exponential") weights = "half";
  }
  const int n = period.front().peers();
  const topo::Spectrum s = topo::analyse_period(period);
  const Degrees d = degrees_of(period);
  const bool symmetric = std::all_of(period.begin(), period.end(),
                                     [](const topo::Topology& t) { return t.symmetric(); });

  if (f.json) {
    Json j = {{"kind", kind},
              {"label", label},
              {"peers", n},
              {"weights", weights},
              {"period", period.size()},
              {"symmetric", symmetric},
              {"rho", s.rho},
              {"spectral_gap", s.spectral_gap},
              // JSON has no infinity: null means gossip never converges.
              {"rounds_1000x", std::isfinite(s.rounds_1000x) ? Json(s.rounds_1000x) : Json()},
              {"degrees", degrees_json(d)}};
    if (kind == "torus")
      j["torus"] = {{"rows", topo::torus_shape(n).first}, {"cols", topo::torus_shape(n).second}};
    if (kind == "random-regular") j["seed"] = f.seed;
    if (f.matrix) j["matrix"] = matrices_json(period);
    std::cout << j.dump() << "\n";
    return;
  }
  std::cout << "topology " << label << ": " << n << " peers, " << weights << " weights\n";
  if (kind == "torus")
    std::cout << "  shape            " << topo::torus_shape(n).first << " x "
              << topo::torus_shape(n).second << "\n";
  std::cout << "  period           " << period.size()
            << (period.size() == 1 ? " matrix (static)" : " matrices, repeating") << "\n";
  std::cout << "  symmetric        " << (symmetric ? "yes" : "no") << "\n";
  std::cout << "  in-degree        " << describe(d.in) << "\n";
  std::cout << "  out-degree       " << describe(d.out) << "\n";
  if (period.size() > 1)
    std::cout << "  contacts         " << describe(d.contacts) << "  (over the whole period)\n";
  std::cout << "  rho              " << fmt(s.rho) << "\n";
  std::cout << "  spectral gap     " << fmt(s.spectral_gap) << "\n";
  std::cout << "  rounds to 1000x  "
            << (std::isfinite(s.rounds_1000x) ? fmt(s.rounds_1000x) : "never (rho = 1)") << "\n";
  if (f.matrix) print_matrices(period);
}

std::string kinds_list() {
  std::string s;
  for (const auto& k : topo::kinds()) s += (s.empty() ? "" : ", ") + k;
  return s;
}

}  // namespace

void add_topology(CLI::App& app) {
  auto flags = std::make_shared<TopologyFlags>();
  CLI::App* cmd = app.add_subcommand(
      "topology",
      "Build and validate a gossip graph's mixing matrices and report rho, the spectral gap and "
      "the rounds gossip needs to shrink disagreement 1000x");
  flags->kind_opt = cmd->add_option("--kind", flags->kind, "the graph: " + kinds_list());
  flags->from_opt = cmd->add_option(
      "--from", flags->from, "instead of --kind: a JSON graph or schedule (docs/TOPOLOGY.md)");
  flags->peers_opt = cmd->add_option("--peers", flags->peers, "number of peers n");
  cmd->add_option("--weights", flags->weights,
                  "mixing weights: metropolis (default), uniform or lazy");
  flags->degree_opt =
      cmd->add_option("--degree", flags->degree, "random-regular: the degree d (n * d even)");
  flags->seed_opt = cmd->add_option("--seed", flags->seed, "random-regular: the generator seed")
                       ->check(seed_check());
  cmd->add_flag("--json", flags->json, "print one JSON object instead of text");
  cmd->add_flag("--matrix", flags->matrix, "also print W (every matrix of a period)");
  cmd->callback([flags] { run_topology(*flags); });
}

}  // namespace dpg::app
