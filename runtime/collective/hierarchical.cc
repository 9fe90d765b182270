#include "runtime/collective/hierarchical.h"

#include <algorithm>
#include <map>
#include <string>

#include "runtime/core/error.h"

namespace dpg::collective {

HostLayout host_layout(const std::vector<int>& host_of) {
  HostLayout l;
  std::map<int, std::size_t> index;  // host id -> position in l.hosts
  for (int r = 0; r < static_cast<int>(host_of.size()); ++r) {
    auto [it, fresh] = index.emplace(host_of[static_cast<std::size_t>(r)], l.hosts.size());
    if (fresh) l.hosts.emplace_back();
    l.hosts[it->second].push_back(r);
  }
  for (const auto& h : l.hosts) l.even = l.even && h.size() == l.hosts.front().size();
  return l;
}

int HostLayout::host(int rank) const {
  for (std::size_t h = 0; h < hosts.size(); ++h) {
    if (std::find(hosts[h].begin(), hosts[h].end(), rank) != hosts[h].end()) {
      return static_cast<int>(h);
    }
  }
  fail(Code::invalid_argument, "rank " + std::to_string(rank) + " is on no host of the layout");
}

int HostLayout::local_index(int rank) const {
  const auto& h = hosts[static_cast<std::size_t>(host(rank))];
  return static_cast<int>(std::find(h.begin(), h.end(), rank) - h.begin());
}

std::vector<int> HostLayout::local(int rank) const {
  return hosts[static_cast<std::size_t>(host(rank))];
}

std::vector<int> HostLayout::cross(int rank) const {
  const std::size_t i = static_cast<std::size_t>(local_index(rank));
  if (!even && i != 0) return {};
  std::vector<int> out;
  for (const auto& h : hosts) out.push_back(h[i]);
  return out;
}

std::vector<int> hierarchical_peers(int rank, const std::vector<int>& host_of,
                                    const Options& options) {
  const HostLayout l = host_layout(host_of);
  std::vector<int> out;
  for (const auto& group : {l.local(rank), l.cross(rank)}) {
    if (group.empty()) continue;
    const int me = static_cast<int>(std::find(group.begin(), group.end(), rank) - group.begin());
    for (int p : peers_needed(me, static_cast<int>(group.size()), options)) {
      const int parent = group[static_cast<std::size_t>(p)];
      if (std::find(out.begin(), out.end(), parent) == out.end()) out.push_back(parent);
    }
  }
  return out;
}

Hierarchy::Hierarchy(Communicator& parent, const std::vector<int>& host_of)
    : world_(parent.world()), layout_(host_layout(host_of)) {
  if (static_cast<int>(host_of.size()) != world_) {
    fail(Code::invalid_argument, rank_prefix(parent.rank()) +
                                     std::to_string(host_of.size()) + " host ids for " +
                                     std::to_string(world_) + " ranks");
  }
  const int me = parent.rank();
  // Keys: the parent rank within a host; the host's position across hosts. Both orders are
  // those of HostLayout, so hierarchical_peers names the peers these groups talk to.
  local_ = split(parent, layout_.host(me), me);
  const bool in_cross = !layout_.cross(me).empty();
  cross_ = split(parent, in_cross ? layout_.local_index(me) : -1, layout_.host(me));
}

void Hierarchy::allreduce(Wire<float> data, Reduce op) { allreduce_any(data, op); }
void Hierarchy::allreduce(Wire<double> data, Reduce op) { allreduce_any(data, op); }

template <typename T>
void Hierarchy::allreduce_any(Wire<T> data, Reduce op) {
  Communicator& local = local_->comm();
  const T inv_n = T(1) / static_cast<T>(world_);
  if (layout_.even) {
    local.reduce_scatter(data, Reduce::sum);
    const auto [b, e] = local.owned_block(data.size());
    const Wire<T> shard = data.subspan(b, e - b);
    cross_->comm().allreduce(shard, Reduce::sum);
    if (op == Reduce::average) {
      for (T& x : shard.values()) x *= inv_n;
    }
    local.allgather_blocks(data);
    return;
  }
  local.allreduce(data, Reduce::sum);
  if (cross_) {
    cross_->comm().allreduce(data, Reduce::sum);
    if (op == Reduce::average) {
      for (T& x : data.values()) x *= inv_n;
    }
  }
  local.broadcast(data.bytes(), 0);
}

}  // namespace dpg::collective
