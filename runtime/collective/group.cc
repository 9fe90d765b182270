#include "runtime/collective/group.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "runtime/core/error.h"

namespace dpg::collective {

Group::Group(net::Transport& parent, std::vector<int> members, Options options)
    : transport_(std::make_unique<net::SubsetTransport>(parent, std::move(members))),
      comm_(std::make_unique<Communicator>(*transport_, options)) {}

std::unique_ptr<Group> split(Communicator& parent, int colour, int key) {
  const int split_no = parent.take_split();
  // Group tag spaces start at kMaxSplits: spaces below it stay for fixed users (the bucketed
  // all-reduce's 1). Space (s + 1) * kMaxSplits + i for split i of a parent in space s never
  // repeats: each parent's children get their own run of kMaxSplits.
  const uint64_t space = (static_cast<uint64_t>(parent.options().tag_space) + 1) * kMaxSplits +
                         static_cast<uint64_t>(split_no);
  if (space >= (uint64_t{1} << 32) / net::kOpsPerSpace) {
    fail(Code::invalid_argument, rank_prefix(parent.rank()) +
                                     "groups nested too deep for the tag spaces");
  }
  const int n = parent.world();
  std::vector<int32_t> mine = {colour, key};
  std::vector<int32_t> all(2 * static_cast<std::size_t>(n));
  parent.allgather(public_value(std::as_bytes(std::span(mine))), std::as_writable_bytes(std::span(all)));
  if (colour < 0) return nullptr;
  std::vector<int> members;
  for (int r = 0; r < n; ++r) {
    if (all[2 * static_cast<std::size_t>(r)] == colour) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return all[2 * static_cast<std::size_t>(a) + 1] < all[2 * static_cast<std::size_t>(b) + 1];
  });
  Options o = parent.options();
  o.tag_space = static_cast<uint32_t>(space);
  return std::make_unique<Group>(parent.transport(), std::move(members), o);
}

}  // namespace dpg::collective
