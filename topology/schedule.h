// Which mixing matrix is in force at each round of a run: a list of phases, each a period of
// matrices that repeats from the phase's first round until the next phase starts.
#pragma once

#include <string>
#include <vector>

#include "topology/spectrum.h"
#include "topology/topology.h"

namespace dpg::topology {

class Schedule {
 public:
  struct Phase {
    long long start_round = 0;     // first round this phase is in force
    std::string label;             // e.g. "ring", "exponential", "file:graph.json"
    std::vector<Topology> period;  // round r uses period[(r - start_round) % period.size()]
    Spectrum spectrum;             // analyse() for one graph, analyse_period() otherwise
  };

  // Throws invalid_argument unless: at least one phase; the first starts at round 0; start rounds
  // strictly increase; every period is non-empty, its union strongly connected, and every matrix
  // has the same peers().
  explicit Schedule(std::vector<Phase> phases);

  // A phase from a period, its spectrum computed here.
  static Phase phase(long long start_round, std::string label, std::vector<Topology> period);

  const Topology& at(long long round) const;  // round >= 0, else out_of_range
  const Phase& phase_at(long long round) const;
  const std::vector<Phase>& phases() const { return phases_; }
  int peers() const { return phases_.front().period.front().peers(); }
  // Every peer `rank` sends to or receives from in any round of any phase, ascending, without
  // rank itself: the connections a transport must open.
  std::vector<int> peers_of(int rank) const;

 private:
  std::vector<Phase> phases_;
};

}  // namespace dpg::topology
