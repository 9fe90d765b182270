// The graphs of a gossip run, from the config's `topology` and `topology_schedule`: generated
// by kind, or read from JSON graph files.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/train_config.h"
#include "runtime/train/gossip.h"

namespace dpg::app {

// The first phase is `topology` from the start; each entry of `topology_schedule` (parsed with
// the config) adds one phase. A graph named "hosts" is the hosts file's `topology`: a kind name or
// a JSON graph (`hosts_topology`, null when the file has none; `hosts_file` names the file in
// errors). Errors name the field and the entry.
std::vector<train::GossipPhase> gossip_phases(const TrainConfig& c, int world,
                                              const Json& hosts_topology = Json(),
                                              const std::string& hosts_file = "hosts file");

// The same checks for a run of one peer, which gossips with nobody and so builds no graph: every
// kind must be known and every graph file (or the hosts file's graph) must read as one, so that a
// mistake shows on the first run rather than on the first run with peers. Throws as above.
void check_gossip_graphs(const TrainConfig& c, const Json& hosts_topology = Json(),
                         const std::string& hosts_file = "hosts file");

// The period of one graph: a kind generated for `world` peers with the config's weight rule,
// degree and seed, or a .json graph file (its own peers); errors name `field`.
std::vector<topology::Topology> gossip_graphs(const std::string& name, const TrainConfig& c,
                                              int world, const std::string& field);
// Whether `name` names a JSON graph file rather than a kind.
bool is_graph_file(const std::string& name);

}  // namespace dpg::app
