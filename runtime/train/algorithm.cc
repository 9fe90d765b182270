#include "runtime/train/algorithm.h"

#include <algorithm>

#include "runtime/core/error.h"
#include "runtime/train/algorithms.h"
#include "runtime/train/ps.h"
#include "topology/schedule.h"

namespace dpg::train {
namespace {

std::vector<int> no_peers(const TrainConfig&, int, int, const std::vector<GossipPhase>&) {
  return {};
}

std::vector<int> neighbours(const TrainConfig&, int rank, int,
                            const std::vector<GossipPhase>& phases) {
  return graph_neighbours(phases, rank);
}

// The partial all-reduce: any peer may share a group with any other.
std::vector<int> every_peer(const TrainConfig&, int rank, int world,
                            const std::vector<GossipPhase>&) {
  std::vector<int> out;
  for (int p = 0; p < world; ++p) {
    if (p != rank) out.push_back(p);
  }
  return out;
}

bool never(const TrainConfig&) { return false; }
bool always(const TrainConfig&) { return true; }
// The buckets' all-reduces run on a communication thread while the backward pass goes on.
bool with_buckets(const TrainConfig& c) { return c.bucket_bytes > 0; }

// Parameter servers: a server (rank below `servers`) talks to every worker, a worker to every
// server (every rank is a worker).
std::vector<int> ps_peers(const TrainConfig& c, int rank, int world,
                          const std::vector<GossipPhase>&) {
  const int servers = ps_servers(c.servers, world);
  std::vector<int> out;
  for (int p = 0; p < (rank < servers ? world : servers); ++p) {
    if (p != rank) out.push_back(p);
  }
  return out;
}

}  // namespace

// An algorithm's factory, defined in its own algo_*.cc file: declared where the table names it
// (in dpg::train, outside the unnamed namespace),
// so that a new algorithm is its file, its line below and its value of Algo.
#define DPG_FACTORY(name)                                               \
  [](const AlgoSetup& s) {                                              \
    std::unique_ptr<Algorithm> name(const AlgoSetup& setup); /* NOLINT */ \
    return name(s);                                                     \
  }

// One line per algorithm: algo, release, overlaps, streams, uses_graph, asynchronous, what it
// allows (secure aggregation, independent init, nccl), peers, factory.
constexpr bool yes = true, no = false;
const AlgoInfo kAlgorithms[] = {
    {Algo::single, dp::Release::summed, never, never, no, no, no, no, no, no_peers,
     DPG_FACTORY(make_single)},
    {Algo::allreduce, dp::Release::summed, with_buckets, with_buckets, no, no, yes, no, yes,
     no_peers, DPG_FACTORY(make_allreduce)},
    {Algo::gossip, dp::Release::own, always, never, yes, no, no, yes, yes, neighbours,
     DPG_FACTORY(make_gossip)},
    {Algo::ps_sync, dp::Release::summed, never, never, no, no, no, no, no, ps_peers,
     DPG_FACTORY(make_ps_sync)},
    // Server threads answer while the workers compute.
    {Algo::ps_async, dp::Release::own, always, never, no, yes, no, no, no, ps_peers,
     DPG_FACTORY(make_ps_async)},
    {Algo::local_sgd, dp::Release::own, never, never, no, no, no, no, yes, no_peers,
     DPG_FACTORY(make_local_sgd)},
    // Responders answer while the peer computes.
    {Algo::ad_psgd, dp::Release::own, always, never, yes, yes, no, yes, no, neighbours,
     DPG_FACTORY(make_ad_psgd)},
    // Rank 0's generator answers while it computes; a group's members talk to each other.
    {Algo::partial_allreduce, dp::Release::own, always, never, no, yes, no, yes, no, every_peer,
     DPG_FACTORY(make_partial_allreduce)},
};

#undef DPG_FACTORY

void Algorithm::apply_on_device(long long, const dp::PrivateGradient*,
                                const model::DeviceSgdOptions&) {
  fail(Code::internal, "apply_on_device: the algorithm does not update on the device");
}

void Algorithm::release(std::span<const float> mine, std::span<float> out) {
  std::copy(mine.begin(), mine.end(), out.begin());
}

void Algorithm::mean_over_peers(collective::Communicator& comm, std::span<const float> mine,
                                std::span<float> out) {
  std::copy(mine.begin(), mine.end(), out.begin());
  comm.allreduce(public_model(out), collective::Reduce::average);
}

std::optional<collective::Hierarchy> make_hierarchy(const AlgoSetup& s) {
  if (!s.config.hierarchical) return std::nullopt;
  std::vector<int> host_of = s.host_of;
  if (host_of.empty()) {  // unknown: a host per rank
    for (int r = 0; r < s.comm->world(); ++r) host_of.push_back(r);
  }
  return std::optional<collective::Hierarchy>(std::in_place, *s.comm, host_of);
}

const AlgoInfo& algo_info(Algo algo) {
  for (const auto& a : kAlgorithms) {
    if (a.algo == algo) return a;
  }
  fail(Code::internal, "algo: \"" + to_string(algo) + "\" has no line in the algorithm table");
}

std::unique_ptr<Algorithm> make_algorithm(const AlgoSetup& setup) {
  // One peer: the single algorithm's line, whatever the config names.
  if (setup.comm == nullptr || setup.comm->world() == 1) return algo_info(Algo::single).make(setup);
  return algo_info(setup.config.algo).make(setup);
}

std::vector<int> graph_neighbours(const std::vector<GossipPhase>& phases, int rank) {
  if (phases.empty()) return {};
  // Only the graphs matter here, not when each starts: number the phases in their order.
  std::vector<topology::Schedule::Phase> all = phases;
  for (std::size_t k = 0; k < all.size(); ++k) all[k].start_round = static_cast<long long>(k);
  return topology::Schedule(std::move(all)).peers_of(rank);
}

}  // namespace dpg::train
