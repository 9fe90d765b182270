// Hierarchical all-reduce: peers grouped by host, so that most bytes move between peers of one
// host (shared memory) and only 1/L of the buffer per peer crosses between hosts, L being the
// peers per host. With the same L on every host: a reduce-scatter within each host, an
// all-reduce of each shard among the peers holding it on the other hosts, an all-gather within
// the host. With uneven hosts: an all-reduce within the host, one across the hosts' first peers,
// a broadcast within the host.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "runtime/collective/communicator.h"
#include "runtime/collective/group.h"

namespace dpg::collective {

// Who talks to whom: host_of[r] names rank r's host (equal values: one host; every peer passes
// the same vector). Local groups hold a host's ranks in rank order; hosts are ordered by their
// lowest rank; a cross group holds the ranks at one local index (uneven hosts: the hosts' first
// ranks only).
struct HostLayout {
  std::vector<std::vector<int>> hosts;  // each host's ranks, ascending; hosts by lowest rank
  bool even = true;                     // every host has as many peers
  int host(int rank) const;
  int local_index(int rank) const;
  std::vector<int> local(int rank) const;
  std::vector<int> cross(int rank) const;  // empty when this rank is in no cross group
};
HostLayout host_layout(const std::vector<int>& host_of);

// The parent ranks a hierarchical all-reduce of `rank` talks to (peers_needed of its local and
// cross groups): a transport must connect them.
std::vector<int> hierarchical_peers(int rank, const std::vector<int>& host_of,
                                    const Options& options);

class Hierarchy {
 public:
  // Collective over `parent` (two splits): every peer constructs it at the same point.
  Hierarchy(Communicator& parent, const std::vector<int>& host_of);

  // In place; the result is bitwise identical on every peer, and equal to the flat all-reduce's
  // wherever the sum is exact (the two add in different orders).
  void allreduce(Wire<float> data, Reduce op = Reduce::sum);
  void allreduce(Wire<double> data, Reduce op = Reduce::sum);

  const HostLayout& layout() const { return layout_; }

 private:
  template <typename T>
  void allreduce_any(Wire<T> data, Reduce op);

  int world_;
  HostLayout layout_;
  std::unique_ptr<Group> local_, cross_;
};

}  // namespace dpg::collective
