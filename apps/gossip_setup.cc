#include "apps/gossip_setup.h"

#include <algorithm>
#include <string>

#include "runtime/core/error.h"
#include "runtime/core/json_io.h"
#include "topology/generators.h"
#include "topology/schedule.h"

namespace dpg::app {
namespace {

// Where the graphs of a run come from, besides the config: the hosts file's "topology".
struct HostsGraph {
  const Json& topology;     // null when the file has none
  const std::string& file;  // for errors
};

// Whether `name` is a known kind; throws naming `field` otherwise.
void check_kind(const std::string& name, const std::string& field) {
  const auto& kinds = topology::kinds();
  if (std::find(kinds.begin(), kinds.end(), name) != kinds.end()) return;
  std::string list;
  for (const auto& k : kinds) list += (list.empty() ? "" : ", ") + k;
  fail(Code::invalid_argument, field + ": unknown topology \"" + name + "\" (kinds: " + list +
                                   "; or a .json graph file)");
}

// The graphs `name` stands for. With `generate` false (a run of one peer) a kind is only checked
// and nothing is built; files are read either way.
std::vector<topology::Topology> graphs_for(const std::string& name, const TrainConfig& c,
                                           int world, const std::string& field,
                                           const HostsGraph& hosts, bool generate) {
  if (name == "hosts") {
    if (hosts.topology.is_null()) {
      fail(Code::invalid_argument, field + ": \"hosts\" names the hosts file's topology, and "
                                           "the run has no hosts file with a \"topology\"");
    }
    const std::string where = hosts.file + ": topology";
    if (hosts.topology.is_string()) {
      const Json none;
      return graphs_for(hosts.topology.get<std::string>(), c, world, where,
                        HostsGraph{none, hosts.file}, generate);
    }
    return topology::from_json(hosts.topology, where + ":", to_string(c.topology_weights));
  }
  if (!generate && !is_graph_file(name)) {
    check_kind(name, field);
    return {};
  }
  return gossip_graphs(name, c, world, field);
}

train::GossipPhase phase(double at, bool in_epochs, const std::string& name, const TrainConfig& c,
                         int world, const std::string& field, const HostsGraph& hosts) {
  std::vector<topology::Topology> period = graphs_for(name, c, world, field, hosts, true);
  if (period.empty() || period.front().peers() != world) {
    fail(Code::invalid_argument,
         field + ": graph \"" + name + "\" has " +
             std::to_string(period.empty() ? 0 : period.front().peers()) +
             " peers, the run has " + std::to_string(world));
  }
  train::GossipPhase p =
      topology::Schedule::phase(0, is_graph_file(name) ? "file:" + name : name, std::move(period));
  p.when = {.at = at, .in_epochs = in_epochs, .graph = name};
  return p;
}

// Every graph of the config, in order: (field, name, at, in_epochs).
template <class F>
void for_each_graph(const TrainConfig& c, F f) {
  f("/topology", c.topology, 0.0, false);
  // The schedule's syntax was checked when the config was read; here only its graphs resolve.
  for (std::size_t i = 0; i < c.topology_schedule.size(); ++i) {
    const ScheduleEntry& e = c.topology_schedule[i];
    f("/topology_schedule: entry " + std::to_string(i) + " \"" +
          to_string(std::vector<ScheduleEntry>{e}) + "\"",
      e.graph, e.at, e.in_epochs);
  }
}

}  // namespace

std::vector<train::GossipPhase> gossip_phases(const TrainConfig& c, int world,
                                              const Json& hosts_topology,
                                              const std::string& hosts_file) {
  const HostsGraph hosts{hosts_topology, hosts_file};
  std::vector<train::GossipPhase> phases;
  for_each_graph(c, [&](const std::string& field, const std::string& name, double at,
                        bool in_epochs) {
    phases.push_back(phase(at, in_epochs, name, c, world, field, hosts));
  });
  return phases;
}

void check_gossip_graphs(const TrainConfig& c, const Json& hosts_topology,
                         const std::string& hosts_file) {
  const HostsGraph hosts{hosts_topology, hosts_file};
  for_each_graph(c, [&](const std::string& field, const std::string& name, double, bool) {
    graphs_for(name, c, 1, field, hosts, false);
  });
}

bool is_graph_file(const std::string& name) {
  return name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
}

std::vector<topology::Topology> gossip_graphs(const std::string& name, const TrainConfig& c,
                                              int world, const std::string& field) {
  if (is_graph_file(name)) {
    return topology::from_json(read_json_file(name), name + ":", to_string(c.topology_weights));
  }
  check_kind(name, field);
  topology::GraphSpec spec;
  spec.kind = name;
  spec.peers = world;
  spec.weights = to_string(c.topology_weights);
  spec.degree = c.topology_degree;
  spec.seed = c.topology_seed;
  try {
    return topology::make(spec);
  } catch (const Error& e) {
    fail(e.code(), field + ": " + e.what());
  }
}

}  // namespace dpg::app
