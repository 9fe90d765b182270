// The partial all-reduce (Prague, Luo et al., ASPLOS 2020): after its own DP-SGD step, a peer
// averages its model with a group of up to `group_size` peers that are ready at the same time,
// so that the fast peers average among themselves while a slow one catches up. Rank 0 runs the
// group generator (groups.h): a peer asks it to join (a collective::Service under op kOpGroups,
// one request per step, the reply is the group's id and members) and the members then send their
// models to each other (op kOpGroupModel, round = the group's id) and each takes their mean,
// summed in rank order so that every member holds the same model. A group of one (nobody ready
// within the patience) is a local step. Each peer adds the full noise to its own gradient
// (Release::own): its model, a post-processing of its own noised steps and of models it received,
// is all it sends. Who averages with whom depends on timing, as in ps-async and ad-psgd.
// A dead or stalled peer is named by the waits on it: the generator's (rank 0), or its group's.
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <string>

#include "runtime/collective/service.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/net/ops.h"
#include "runtime/train/algorithms.h"
#include "runtime/train/groups.h"

namespace dpg::train {
namespace {

using net::kOpGroupModel;
using net::kOpGroups;

// The generator's reply: the group's id, its size and its members (the rest -1).
struct GroupReply {
  std::uint64_t id;
  std::int32_t count;
  std::int32_t pad;
  std::array<std::int32_t, 1024> members;  // group_size <= 1024 (the config's bound)
};

std::size_t reply_bytes(int group_size) {
  return offsetof(GroupReply, members) + sizeof(std::int32_t) * static_cast<std::size_t>(group_size);
}

class PartialAllReduce final : public Algorithm {
 public:
  explicit PartialAllReduce(const AlgoSetup& s)
      : comm_(*s.comm),
        rank_(s.comm->rank()),
        world_(s.comm->world()),
        group_size_(s.config.group_size),
        service_(s.comm->transport(), kOpGroups, "partial-allreduce",
                 {{0, reply_bytes(s.config.group_size)}}, s.tracer) {
    if (group_size_ < 2 || group_size_ > world_) {
      fail(Code::invalid_argument,
           rank_prefix(rank_) + "/group_size: " + std::to_string(group_size_) +
               " peers a group, but the run has " + std::to_string(world_) +
               " peers (need 2 to " + std::to_string(world_) + ")");
    }
    if (rank_ == 0) generator_.emplace(world_, group_size_, std::chrono::milliseconds(100));
    inbox_.resize(static_cast<std::size_t>(group_size_ - 1) * s.num_params);
    sum_.resize(s.num_params);
    DPG_INFO("train: partial-allreduce: groups of up to " << group_size_ << " of " << world_
                                                          << " peers, formed by rank 0");
  }

  void before_gradient(long long, std::span<const float>) override { start_generator(); }

  void apply(long long t, const dp::PrivateGradient& mine, std::span<float> params,
             Sgd& sgd) override {
    sgd.apply(params, mine);
    const Group g = join(t);
    ++groups_;
    if (g.members.size() == 1) {
      ++lone_;
      return;
    }
    members_ += static_cast<long long>(g.members.size());
    average(g, params);
  }

  void finish(std::span<float>) override {
    if (rank_ != 0) return service_.finish({0});
    start_generator();  // a run without steps still hears the `done`s
    service_.join();
  }

  void release(std::span<const float> mine, std::span<float> out) override {
    std::copy(mine.begin(), mine.end(), out.begin());
    comm_.allreduce(public_model(out), collective::Reduce::average);
  }

  bool replicas_differ() const override { return true; }

  void save(long long t, Checkpoint& out) override {
    if (rank_ == 0 && service_.serving()) service_.drain(static_cast<uint64_t>(t));
    Json& a = out.meta["algo"];
    a["groups"] = groups_;
    a["lone_steps"] = lone_;
    a["group_members"] = members_;
  }
  void restore(long long t, const Checkpoint& in) override {
    JsonReader a(in.meta.at("algo"), in.where + ": /algo");
    groups_ = a.integer("groups");
    lone_ = a.integer("lone_steps");
    members_ = a.integer("group_members");
    first_round_ = static_cast<uint64_t>(t);
    service_.number_from(first_round_);
  }

  void annotate(Json& line, long long, bool summary) const override {
    line["group_size"] = group_size_;
    line["groups"] = groups_;
    line["lone_steps"] = lone_;
    if (!summary) return;
    // The mean size of the groups this peer averaged in (groups of one left out).
    const long long shared = groups_ - lone_;
    line["mean_group"] = shared > 0 ? Json(static_cast<double>(members_) / shared) : Json(nullptr);
    if (generator_) {
      line["groups_formed"] = generator_->groups_formed();
      line["patience_ms"] = std::chrono::duration<double, std::milli>(generator_->patience()).count();
    }
    // Groups formed by timing mix by no fixed matrix: no rho, no spectral gap.
    line["rho"] = line["spectral_gap"] = nullptr;
  }

 private:
  // Rank 0 answers every other peer's requests to join from a responder thread per peer.
  void start_generator() {
    if (rank_ != 0 || service_.serving()) return;
    std::vector<int> clients;
    for (int r = 1; r < world_; ++r) clients.push_back(r);
    using Reply = collective::Service::Reply;
    service_.serve(clients, first_round_, [this](const auto& r, Wire<const std::byte>,
                                                 Reply& out) {
      const Group g = generator_->join(r.peer, [this] {
        if (service_.failed()) {
          throw collective::Blame(service_.culprit(), Code::aborted,
                                  "partial-allreduce: the group generator stopped");
        }
      });
      GroupReply reply{};
      reply.id = g.id;
      reply.count = static_cast<std::int32_t>(g.members.size());
      std::copy(g.members.begin(), g.members.end(), reply.members.begin());
      const auto* bytes = reinterpret_cast<const std::byte*>(&reply);
      out.put(0, public_value(std::span<const std::byte>(bytes, out.size())));
    });
  }

  // This peer's group for step t: from the generator, over the service unless it is rank 0.
  Group join(long long t) {
    if (rank_ == 0) return generator_->join(0, [this] { service_.rethrow(); });
    GroupReply reply{};
    const int ticket = service_.call(
        0, 0, static_cast<uint64_t>(t), public_value(std::span<const std::byte>()),
        std::span(reinterpret_cast<std::byte*>(&reply), reply_bytes(group_size_)));
    service_.wait(ticket);
    Group g;
    g.id = reply.id;
    if (reply.count < 1 || reply.count > group_size_) {
      service_.fail(0, Code::data_loss, "partial-allreduce: a group of " +
                                            std::to_string(reply.count) + " from rank 0");
    }
    g.members.assign(reply.members.begin(), reply.members.begin() + reply.count);
    if (std::find(g.members.begin(), g.members.end(), rank_) == g.members.end()) {
      service_.fail(0, Code::data_loss, "partial-allreduce: rank 0 sent a group without us");
    }
    return g;
  }

  // Every member's model to every other, then their mean in rank order (the same on each).
  void average(const Group& g, std::span<float> params) {
    const std::size_t n = params.size();
    std::vector<net::Handle> recvs, sends;
    std::size_t slot = 0;
    for (int m : g.members) {
      if (m == rank_) continue;
      recvs.push_back(comm_.recv(m, {kOpGroupModel, g.id, 0},
                                 std::as_writable_bytes(std::span(inbox_).subspan(slot++ * n, n))));
    }
    for (int m : g.members) {
      if (m == rank_) continue;
      sends.push_back(comm_.send(m, {kOpGroupModel, g.id, 0},
                                 public_model(std::span<const float>(params)).bytes()));
    }
    for (auto h : recvs) comm_.wait(h);
    std::fill(sum_.begin(), sum_.end(), 0.0f);
    slot = 0;
    for (int m : g.members) {
      const float* x = m == rank_ ? params.data() : inbox_.data() + slot++ * n;
      for (std::size_t i = 0; i < n; ++i) sum_[i] += x[i];
    }
    for (auto h : sends) comm_.wait(h);  // before params change under them
    const float inv = 1.0f / static_cast<float>(g.members.size());
    for (std::size_t i = 0; i < n; ++i) params[i] = sum_[i] * inv;
  }

  collective::Communicator& comm_;
  int rank_, world_, group_size_;
  std::optional<GroupGenerator> generator_;  // rank 0
  std::vector<float> inbox_;  // (group_size - 1, model): the other members' models
  std::vector<float> sum_;
  long long groups_ = 0, lone_ = 0, members_ = 0;  // this peer's, since the run's start
  uint64_t first_round_ = 0;                       // a resumed run's first step
  collective::Service service_;  // last: its responders stop before the generator goes
};

}  // namespace

std::unique_ptr<Algorithm> make_partial_allreduce(const AlgoSetup& s) {
  return std::make_unique<PartialAllReduce>(s);
}

}  // namespace dpg::train
