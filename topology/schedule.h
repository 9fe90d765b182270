// Which mixing matrix is in force at each round of a run: a list of phases, each a period of
// matrices that repeats from the phase's first round until the next phase starts. A phase is the
// run's one schedule type: the config's entry (when, in epochs or steps, and which graph;
// ScheduleEntry) with the graphs it names, and, once a run resolves it, its first round.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/train_config.h"
#include "topology/spectrum.h"
#include "topology/topology.h"

namespace dpg::topology {

class Schedule {
 public:
  struct Phase {
    // When the phase comes into force, as the config says it (`at` epochs or steps from the
    // start; the first phase at 0) and the graph it names; resolved(steps_per_epoch) gives the
    // phase with its first round.
    ScheduleEntry when;
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
  // The phases with their first rounds from `when` and 1 / q (an epoch's steps, which the run's
  // plan fixes): an epoch boundary is ceil(at / q), a step count is at itself.
  static std::vector<Phase> resolved(std::vector<Phase> phases, double steps_per_epoch);

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
