// The partial all-reduce's group generator (Prague, Luo et al. ASPLOS 2020): peers that are ready
// to average ask to join a group; the first `group_size` to ask form one, in the order they
// asked. A peer that has waited longer than the patience goes with whoever waits with it, alone
// if nobody does, so that a group never waits on a peer that is computing, stalled, in one of the
// trainer's collectives or finished. The patience is twice the lower median of the peers' own periods
// (the time from one group of theirs to their next request: their step's compute), measured
// here, so that a fast peer waits about one fast step for a partner and never a slow one's.
// Thread-safe: each joining thread blocks in join() until its group is formed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

namespace dpg::train {

struct Group {
  std::uint64_t id = 0;      // numbered from the generator's first id, in formation order
  std::vector<int> members;  // ascending; the caller among them
};

class GroupGenerator {
 public:
  using Clock = std::chrono::steady_clock;
  // `world` peers (ranks 0..world-1), groups of up to `group_size` (2..world); the patience
  // before any period is known is `first_patience`. Group ids start at `first_id`.
  GroupGenerator(int world, int group_size, Clock::duration first_patience,
                 std::uint64_t first_id = 0);

  // Blocks until `peer` is in a group and returns it. `check` runs at least every 50 ms while
  // the peer waits (it throws to give up: the peer leaves the queue first).
  Group join(int peer, const std::function<void()>& check);

  // The patience now: twice the lower median period, within [1 ms, 2 s].
  Clock::duration patience() const;
  std::uint64_t groups_formed() const;

 private:
  struct Waiting {
    int peer;
    Clock::time_point since;
  };
  Clock::duration patience_locked() const;
  void form(std::size_t n);  // from the front of the queue; caller holds mu_

  const int world_;
  const std::size_t group_size_;
  const Clock::duration first_patience_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Waiting> queue_;
  std::vector<std::optional<Group>> formed_;         // per peer: its group, until it takes it
  std::vector<std::optional<Clock::time_point>> left_;  // per peer: when it last left a group
  std::vector<double> period_s_;                     // per peer: its smoothed period, 0 unknown
  std::uint64_t next_id_;
  std::uint64_t first_id_;
};

}  // namespace dpg::train
