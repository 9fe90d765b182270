#include "topology/schedule.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "runtime/core/error.h"

namespace dpg::topology {

Schedule::Schedule(std::vector<Phase> phases) : phases_(std::move(phases)) {
  auto bad = [](const std::string& what) { fail(Code::invalid_argument, "schedule: " + what); };
  if (phases_.empty()) bad("no phases");
  if (phases_.front().start_round != 0)
    bad("the first phase (" + phases_.front().label + ") starts at round " +
        std::to_string(phases_.front().start_round) + ", not 0");
  for (std::size_t k = 0; k < phases_.size(); ++k) {
    const Phase& p = phases_[k];
    const std::string name = "phase " + std::to_string(k) + " (" + p.label + ")";
    if (k > 0 && p.start_round <= phases_[k - 1].start_round)
      bad(name + " starts at round " + std::to_string(p.start_round) +
          ", not after the previous phase's " + std::to_string(phases_[k - 1].start_round));
    if (p.period.empty()) bad(name + " has no mixing matrix");
    const int n = phases_.front().period.empty() ? 0 : phases_.front().period.front().peers();
    for (const Topology& t : p.period)
      if (t.peers() != n)
        bad(name + ": " + t.name() + " has " + std::to_string(t.peers()) +
            " peers, the first phase has " + std::to_string(n));
    require_connected(p.period, "schedule: " + name);
  }
}

Schedule::Phase Schedule::phase(long long start_round, std::string label,
                                std::vector<Topology> period) {
  Phase p;
  p.start_round = start_round;
  p.label = std::move(label);
  p.period = std::move(period);
  if (p.period.empty()) fail(Code::invalid_argument, "schedule: phase " + p.label + " is empty");
  p.spectrum = analyse_period(p.period);
  return p;
}

std::vector<Schedule::Phase> Schedule::resolved(std::vector<Phase> phases,
                                               double steps_per_epoch) {
  for (Phase& p : phases) {
    p.start_round = p.when.in_epochs
                        ? static_cast<long long>(std::ceil(p.when.at * steps_per_epoch - 1e-9))
                        : static_cast<long long>(std::llround(p.when.at));
  }
  return phases;
}

const Schedule::Phase& Schedule::phase_at(long long round) const {
  if (round < 0)
    fail(Code::out_of_range, "schedule: round " + std::to_string(round) + " is negative");
  // The last phase whose start is <= round; the first starts at 0, so there is one.
  const auto after =
      std::upper_bound(phases_.begin(), phases_.end(), round,
                       [](long long r, const Phase& p) { return r < p.start_round; });
  return *(after - 1);
}

const Topology& Schedule::at(long long round) const {
  const Phase& p = phase_at(round);
  const auto size = static_cast<long long>(p.period.size());
  return p.period[static_cast<std::size_t>((round - p.start_round) % size)];
}

std::vector<int> Schedule::peers_of(int rank) const {
  std::set<int> all;
  for (const Phase& p : phases_)
    for (const Topology& t : p.period) {
      const Topology::Neighbourhood nb = t.neighbourhood(rank);
      all.insert(nb.recv_from.begin(), nb.recv_from.end());
      all.insert(nb.send_to.begin(), nb.send_to.end());
    }
  return {all.begin(), all.end()};
}

}  // namespace dpg::topology
