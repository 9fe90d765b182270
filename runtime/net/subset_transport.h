// A transport over a subset of another's ranks: the group of a split communicator
// (collective/group.h). Group rank i is members[i] of the parent; sends, receives and waits go
// to the parent unchanged, so matching, deadlines, the first failure and the messages that name
// a peer are the parent's, in its ranks (what a user finds in the hosts file). The parent must
// outlive this and connect every member this rank talks to.
#pragma once

#include <vector>

#include "runtime/net/transport.h"

namespace dpg::net {

class SubsetTransport final : public Transport {
 public:
  // `members`: distinct parent ranks, this rank among them; group rank i is members[i].
  SubsetTransport(Transport& parent, std::vector<int> members);

  int rank() const override { return rank_; }
  int world() const override { return static_cast<int>(members_.size()); }
  Handle send(int peer, Tag tag, std::span<const std::byte> data) override;
  Handle recv(int peer, Tag tag, std::span<std::byte> data) override;
  void wait(Handle handle) override { parent_.wait(handle); }
  std::chrono::milliseconds timeout() const override { return parent_.timeout(); }
  void poison(Code code, const std::string& message) override { parent_.poison(code, message); }

  const std::vector<int>& members() const { return members_; }
  Transport& parent() { return parent_; }

 private:
  int parent_rank(int peer, const char* what) const;

  Transport& parent_;
  std::vector<int> members_;
  int rank_ = -1;
};

}  // namespace dpg::net
