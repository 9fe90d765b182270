#include "runtime/train/algorithm.h"

#include <algorithm>

#include "runtime/core/error.h"
#include "runtime/train/algorithms.h"
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

bool never(const TrainConfig&) { return false; }
bool always(const TrainConfig&) { return true; }
// The buckets' all-reduces run on a communication thread while the backward pass goes on.
bool with_buckets(const TrainConfig& c) { return c.bucket_bytes > 0; }

// One line per algorithm: name, release, overlaps, uses_graph, peers, factory.
const AlgoInfo kAlgorithms[] = {
    {"single", dp::Release::summed, never, false, no_peers, make_single},
    {"allreduce", dp::Release::summed, with_buckets, false, no_peers, make_allreduce},
    {"gossip", dp::Release::own, always, true, neighbours, make_gossip},
    {"local-sgd", dp::Release::own, never, false, no_peers, make_local_sgd},
};

}  // namespace

void Algorithm::release(std::span<const float> mine, std::span<float> out) {
  std::copy(mine.begin(), mine.end(), out.begin());
}

void Algorithm::mean_over_peers(collective::Communicator& comm, std::span<const float> mine,
                                std::span<float> out) {
  std::copy(mine.begin(), mine.end(), out.begin());
  comm.allreduce(out, collective::Reduce::average);
}

const AlgoInfo& algo_info(const std::string& name) {
  for (const auto& a : kAlgorithms) {
    if (name == a.name) return a;
  }
  std::string known;
  for (const auto& a : kAlgorithms) known += (known.empty() ? "" : ", ") + std::string(a.name);
  fail(Code::invalid_argument, "algo: unknown algorithm \"" + name + "\" (known: " + known + ")");
}

std::unique_ptr<Algorithm> make_algorithm(const AlgoSetup& setup) {
  if (setup.comm == nullptr || setup.comm->world() == 1) return make_single(setup);
  return algo_info(setup.config.algo).make(setup);
}

std::vector<int> graph_neighbours(const std::vector<GossipPhase>& phases, int rank) {
  if (phases.empty()) return {};
  // Only the graphs matter here, not when each starts: number the phases in their order.
  std::vector<topology::Schedule::Phase> all;
  for (const auto& p : phases) {
    all.push_back(topology::Schedule::phase(static_cast<long long>(all.size()), p.label, p.period));
  }
  return topology::Schedule(std::move(all)).peers_of(rank);
}

}  // namespace dpg::train
