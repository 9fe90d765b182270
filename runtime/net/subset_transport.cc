#include "runtime/net/subset_transport.h"

#include <algorithm>
#include <string>

#include "runtime/core/error.h"

namespace dpg::net {

SubsetTransport::SubsetTransport(Transport& parent, std::vector<int> members)
    : parent_(parent), members_(std::move(members)) {
  const int n = parent_.world();
  for (std::size_t i = 0; i < members_.size(); ++i) {
    const int m = members_[i];
    if (m < 0 || m >= n) {
      fail(Code::invalid_argument, rank_prefix(parent_.rank()) + "group member " +
                                       std::to_string(m) + " is not a rank of a world of " +
                                       std::to_string(n));
    }
    if (std::find(members_.begin(), members_.begin() + static_cast<std::ptrdiff_t>(i), m) !=
        members_.begin() + static_cast<std::ptrdiff_t>(i)) {
      fail(Code::invalid_argument, rank_prefix(parent_.rank()) +
                                       "group member " + std::to_string(m) + " listed twice");
    }
    if (m == parent_.rank()) rank_ = static_cast<int>(i);
  }
  if (rank_ < 0) {
    fail(Code::invalid_argument,
         "rank " + std::to_string(parent_.rank()) + " is not a member of its own group");
  }
}

int SubsetTransport::parent_rank(int peer, const char* what) const {
  if (peer < 0 || peer >= world()) {
    fail(Code::invalid_argument, rank_prefix(parent_.rank()) + what +
                                     " group rank " + std::to_string(peer) + " of a group of " +
                                     std::to_string(world()));
  }
  return members_[static_cast<std::size_t>(peer)];
}

Handle SubsetTransport::send(int peer, Tag tag, std::span<const std::byte> data) {
  return parent_.send(refusing(*this, [&] { return parent_rank(peer, "send to"); }), tag, data);
}

Handle SubsetTransport::recv(int peer, Tag tag, std::span<std::byte> data) {
  return parent_.recv(refusing(*this, [&] { return parent_rank(peer, "receive from"); }), tag,
                      data);
}

}  // namespace dpg::net
