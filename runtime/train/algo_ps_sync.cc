// A synchronous parameter server: ranks 0..K-1 each hold a contiguous shard of the parameters
// and every rank (servers included) is a worker. A step: every worker pushes each server the
// shard of its released (noised) gradient, each server sums the N shards in rank order, takes an
// SGD step on its shard with its own optimiser state, and sends the new shard to every worker.
// Every worker waits for all of them, so this is minibatch SGD, the same run as the all-reduce's
// (up to the order of the float sums).
#include <algorithm>
#include <optional>
#include <string>

#include "runtime/core/error.h"
#include "runtime/train/algorithms.h"
#include "runtime/train/ps.h"

namespace dpg::train {

std::pair<std::size_t, std::size_t> shard_range(std::size_t num_params, int servers, int s) {
  if (servers < 1 || s < 0 || s >= servers) {
    fail(Code::invalid_argument, "shard_range: shard " + std::to_string(s) + " of " +
                                     std::to_string(servers) + " servers");
  }
  const auto k = static_cast<std::size_t>(servers);
  const auto i = static_cast<std::size_t>(s);
  const std::size_t base = num_params / k, extra = num_params % k;
  const std::size_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

int ps_servers(int configured, int world) {
  if (configured < 1 || configured > world) {
    fail(Code::invalid_argument, "/servers: " + std::to_string(configured) +
                                     " parameter servers, but the run has " +
                                     std::to_string(world) + " peers (need 1 to " +
                                     std::to_string(world) + ")");
  }
  return configured;
}

namespace {

std::span<std::byte> bytes_of(std::span<float> v) { return std::as_writable_bytes(v); }

class PsSync final : public Algorithm {
 public:
  explicit PsSync(const AlgoSetup& s)
      : comm_(*s.comm),
        mechanism_(s.mechanism),
        num_params_(s.num_params),
        servers_(ps_servers(s.config.servers, s.comm->world())),
        rank_(s.comm->rank()),
        world_(s.comm->world()) {
    if (is_server()) {
      const auto [b, e] = shard_range(num_params_, servers_, rank_);
      inbox_.resize(static_cast<std::size_t>(world_) * (e - b));
      sum_.resize(e - b);
    }
  }

  void apply(long long t, const dp::PrivateGradient& mine, std::span<float> params,
             Sgd& sgd) override {
    const auto round = static_cast<uint64_t>(t);
    const auto [mb, me] = is_server() ? shard_range(num_params_, servers_, rank_)
                                      : std::pair<std::size_t, std::size_t>{0, 0};
    const std::size_t len = me - mb;
    if (is_server() && !shard_) {
      // Every replica starts from rank 0's model (the trainer broadcasts it), so the shard is
      // ours; the optimiser takes the worker's options.
      shard_.emplace(params.begin() + static_cast<std::ptrdiff_t>(mb),
                     params.begin() + static_cast<std::ptrdiff_t>(me));
      sgd_.emplace(len, sgd.options());
      if (restored_) sgd_->restore(restored_->velocity, restored_->started);
    }
    handles_.clear();
    pushes_.clear();
    pulls_.clear();
    // Every receive first (a server's pushes in, every server's shard back), then the sends.
    if (is_server()) {
      for (int w = 0; w < world_; ++w) {
        if (w == rank_) continue;
        pushes_.push_back(comm_.recv(
            w, {kOpPsPush, round, 0},
            bytes_of(std::span<float>(inbox_).subspan(static_cast<std::size_t>(w) * len, len))));
      }
    }
    for (int s = 0; s < servers_; ++s) {
      if (s == rank_) continue;
      const auto [b, e] = shard_range(num_params_, servers_, s);
      pulls_.push_back(comm_.recv(s, {kOpPsPull, round, 0}, bytes_of(params.subspan(b, e - b))));
    }
    // The push: only the released gradient (its noise added by the mechanism) leaves here. The
    // exchange hands this server's range back summed over every worker.
    const dp::PrivateGradient summed = mechanism_.exchange(mine, [&](Wire<float> released) {
      const std::span<float> g = released.values();
      for (int s = 0; s < servers_; ++s) {
        if (s == rank_) continue;
        const auto [b, e] = shard_range(num_params_, servers_, s);
        handles_.push_back(comm_.send(s, {kOpPsPush, round, 0}, released.subspan(b, e - b).bytes()));
      }
      if (!is_server()) return;
      for (auto h : pushes_) comm_.wait(h);
      // The sum in rank order, the same on every server whatever the arrival order.
      std::copy_n(rank_ == 0 ? g.data() + mb : inbox_.data(), len, sum_.begin());
      for (int w = 1; w < world_; ++w) {
        const float* x = w == rank_ ? g.data() + mb : inbox_.data() + static_cast<std::size_t>(w) * len;
        for (std::size_t i = 0; i < len; ++i) sum_[i] += x[i];
      }
      std::copy(sum_.begin(), sum_.end(), g.begin() + static_cast<std::ptrdiff_t>(mb));
    });
    if (is_server()) {
      // The server's step on its shard, at the worker's learning rate (the schedule's).
      sgd_->set_lr(sgd.options().lr);
      sgd_->apply(*shard_, summed.part(mb, len));
      for (int w = 0; w < world_; ++w) {
        if (w == rank_) continue;
        handles_.push_back(
            comm_.send(w, {kOpPsPull, round, 0}, public_model(std::span<const float>(*shard_)).bytes()));
      }
      std::copy(shard_->begin(), shard_->end(), params.begin() + static_cast<std::ptrdiff_t>(mb));
    }
    for (auto h : pulls_) comm_.wait(h);
    for (auto h : handles_) comm_.wait(h);
  }

  // A server's shard is its slice of the model after every step, which the trainer keeps; its
  // optimiser state is its own.
  void save(long long, Checkpoint& out) override {
    if (!sgd_) return;  // no step taken yet
    out.meta["algo"]["server_started"] = sgd_->started();
    out.put("algo/server_momentum", sgd_->momentum_buffer());
  }
  void restore(long long, const Checkpoint& in) override {
    if (!is_server() || !in.meta.contains("algo")) return;
    JsonReader r(in.meta.at("algo"), in.where + ": /algo");
    Restored st;
    st.started = r.boolean("server_started");
    st.velocity.resize(in.count<float>("algo/server_momentum"));
    in.get("algo/server_momentum", std::span<float>(st.velocity));
    restored_ = std::move(st);
  }

 private:
  struct Restored {
    std::vector<float> velocity;
    bool started = false;
  };
  bool is_server() const { return rank_ < servers_; }

  collective::Communicator& comm_;
  dp::GaussianMechanism& mechanism_;
  std::size_t num_params_;
  int servers_, rank_, world_;
  std::vector<float> inbox_;  // (world, shard): each worker's pushed shard (a server's)
  std::vector<float> sum_;
  std::optional<std::vector<float>> shard_;  // this server's parameters
  std::optional<Sgd> sgd_;                   // and their optimiser state
  std::optional<Restored> restored_;         // from a checkpoint, for the first step
  std::vector<net::Handle> handles_;  // the sends
  std::vector<net::Handle> pushes_;   // a server's receives of the workers' shards
  std::vector<net::Handle> pulls_;    // the receives of the servers' shards
};

}  // namespace

std::unique_ptr<Algorithm> make_ps_sync(const AlgoSetup& s) { return std::make_unique<PsSync>(s); }

}  // namespace dpg::train
