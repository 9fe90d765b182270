#include "apps/gossip_setup.h"

#include <algorithm>
#include <string>

#include "runtime/core/error.h"
#include "runtime/core/json_io.h"
#include "topology/generators.h"
#include "topology/schedule.h"

namespace dpg::app {
namespace {

std::vector<topology::Topology> graphs_for(const std::string& name, const TrainConfig& c,
                                           int world, const std::string& field,
                                           const Json& hosts_topology) {
  if (name == "hosts") {
    if (hosts_topology.is_null()) {
      fail(Code::invalid_argument, field + ": \"hosts\" names the hosts file's topology, and "
                                           "the run has no hosts file with a \"topology\"");
    }
    if (!hosts_topology.is_string()) {
      return topology::from_json(hosts_topology, "hosts file: topology:",
                                 to_string(c.topology_weights));
    }
    return graphs_for(hosts_topology.get<std::string>(), c, world, "hosts file: topology",
                      Json());
  }
  return gossip_graphs(name, c, world, field);
}

train::GossipPhase phase(double at, bool in_epochs, const std::string& name, const TrainConfig& c,
                         int world, const std::string& field, const Json& hosts_topology) {
  train::GossipPhase p;
  p.at = at;
  p.in_epochs = in_epochs;
  p.label = is_graph_file(name) ? "file:" + name : name;
  p.period = graphs_for(name, c, world, field, hosts_topology);
  if (p.period.empty() || p.period.front().peers() != world) {
    fail(Code::invalid_argument,
         field + ": graph \"" + name + "\" has " +
             std::to_string(p.period.empty() ? 0 : p.period.front().peers()) +
             " peers, the run has " + std::to_string(world));
  }
  return p;
}

}  // namespace

std::vector<train::GossipPhase> gossip_phases(const TrainConfig& c, int world,
                                              const Json& hosts_topology) {
  std::vector<train::GossipPhase> phases;
  phases.push_back(phase(0, false, c.topology, c, world, "/topology", hosts_topology));
  // The schedule's syntax was checked when the config was read; here only its graphs resolve.
  for (std::size_t i = 0; i < c.topology_schedule.size(); ++i) {
    const ScheduleEntry& e = c.topology_schedule[i];
    const std::string field = "/topology_schedule: entry " + std::to_string(i) + " \"" +
                              to_string(std::vector<ScheduleEntry>{e}) + "\"";
    phases.push_back(phase(e.at, e.in_epochs, e.graph, c, world, field, hosts_topology));
  }
  return phases;
}

bool is_graph_file(const std::string& name) {
  return name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
}

std::vector<topology::Topology> gossip_graphs(const std::string& name, const TrainConfig& c,
                                              int world, const std::string& field) {
  if (is_graph_file(name)) {
    return topology::from_json(read_json_file(name), name + ":", to_string(c.topology_weights));
  }
  const auto& kinds = topology::kinds();
  if (std::find(kinds.begin(), kinds.end(), name) == kinds.end()) {
    std::string list;
    for (const auto& k : kinds) list += (list.empty() ? "" : ", ") + k;
    fail(Code::invalid_argument, field + ": unknown topology \"" + name + "\" (kinds: " + list +
                                     "; or a .json graph file)");
  }
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
