// Process groups: communicators over a subset of ranks, split from a parent as MPI_Comm_split
// does, for collectives within a host, across hosts, or any other partition of the peers.
#pragma once

#include <memory>
#include <vector>

#include "runtime/collective/communicator.h"
#include "runtime/net/subset_transport.h"

namespace dpg::collective {

// A communicator over some of the parent's ranks. Its collectives run over the parent's
// transport (errors name parent ranks) in a tag space of its own, so they never meet the
// parent's nor another group's; it may be used while the parent is idle, on the same thread.
class Group {
 public:
  Group(net::Transport& parent, std::vector<int> members, Options options);

  Communicator& comm() { return *comm_; }
  // The parent ranks, in group-rank order.
  const std::vector<int>& members() const { return transport_->members(); }

 private:
  std::unique_ptr<net::SubsetTransport> transport_;
  std::unique_ptr<Communicator> comm_;
};

// Collective over `parent`: every peer calls it, in the same order as the parent's other calls.
// Peers passing the same colour form one group, ordered by key, then by parent rank; a negative
// colour joins none (nullptr returned). The group's options are the parent's with a tag space
// derived from the parent's and the number of splits before this one, the same on every peer.
// Throws invalid_argument past kMaxSplits (communicator.h) splits of one parent.
std::unique_ptr<Group> split(Communicator& parent, int colour, int key);

}  // namespace dpg::collective
