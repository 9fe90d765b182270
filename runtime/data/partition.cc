#include "runtime/data/partition.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <sstream>

#include "runtime/core/check.h"
#include "runtime/core/error.h"
#include "runtime/core/rng.h"

namespace dpg::data {
namespace {

void check_world(int world) {
  if (world < 1) fail(Code::invalid_argument, "peers must be >= 1, got " + std::to_string(world));
}

std::vector<std::size_t> shuffled_range(std::size_t n, Rng& rng) {
  std::vector<std::size_t> perm(n);
  std::iota(perm.begin(), perm.end(), std::size_t{0});
  rng.shuffle(std::span<std::size_t>(perm));
  return perm;
}

}  // namespace

PartitionSpec parse_partition(const std::string& text) {
  if (text == "iid") return {};
  const std::string prefix = "dirichlet:";
  if (text.rfind(prefix, 0) == 0) {
    const std::string number = text.substr(prefix.size());
    double alpha = 0.0;
    const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), alpha);
    const bool parsed =
        !number.empty() && ec == std::errc{} && ptr == number.data() + number.size();
    if (!parsed || !std::isfinite(alpha) || alpha <= 0.0) {
      fail(Code::invalid_argument,
           "partition \"" + text + "\": ALPHA of dirichlet:ALPHA must be a number > 0");
    }
    return {PartitionSpec::Kind::dirichlet, alpha};
  }
  fail(Code::invalid_argument,
       "partition: expected \"iid\" or \"dirichlet:ALPHA\", got \"" + text + "\"");
}

std::vector<std::size_t> iid_indices(std::size_t n, int rank, int world, std::uint64_t seed) {
  check_world(world);
  if (rank < 0 || rank >= world) {
    fail(Code::invalid_argument,
         "rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world) + ")");
  }
  Rng rng(seed, stream::kPartition);
  const std::vector<std::size_t> perm = shuffled_range(n, rng);
  std::vector<std::size_t> mine;
  mine.reserve(n / world + 1);
  for (std::size_t i = static_cast<std::size_t>(rank); i < n; i += world) mine.push_back(perm[i]);
  return mine;
}

std::vector<std::size_t> counted_indices(std::size_t n, int rank,
                                         const std::vector<std::size_t>& counts,
                                         std::uint64_t seed) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= counts.size()) {
    fail(Code::invalid_argument, "rank " + std::to_string(rank) + " has no count among " +
                                     std::to_string(counts.size()));
  }
  std::size_t total = 0, begin = 0;
  for (std::size_t j = 0; j < counts.size(); ++j) {
    if (j == static_cast<std::size_t>(rank)) begin = total;
    total += counts[j];
  }
  if (total != n) {
    fail(Code::invalid_argument, "the peers' row counts add up to " + std::to_string(total) +
                                     ", not the " + std::to_string(n) + " rows");
  }
  Rng rng(seed, stream::kPartition);
  const std::vector<std::size_t> perm = shuffled_range(n, rng);
  return {perm.begin() + static_cast<std::ptrdiff_t>(begin),
          perm.begin() + static_cast<std::ptrdiff_t>(begin + counts[static_cast<std::size_t>(rank)])};
}

ValidationSplit split_validation(std::size_t n, std::size_t rows, std::uint64_t seed) {
  if (rows >= n) {
    fail(Code::invalid_argument, "validation: " + std::to_string(rows) +
                                     " rows would leave none of the " + std::to_string(n) +
                                     " training rows to train on");
  }
  Rng rng(seed, stream::kValidation);
  std::vector<std::size_t> perm = shuffled_range(n, rng);
  ValidationSplit s;
  s.validation.assign(perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(rows));
  s.train.assign(perm.begin() + static_cast<std::ptrdiff_t>(rows), perm.end());
  // In file order, so each keeps the source's order and a row's neighbours stay its own.
  std::sort(s.validation.begin(), s.validation.end());
  std::sort(s.train.begin(), s.train.end());
  return s;
}

std::vector<std::vector<std::size_t>> iid_partition(std::size_t n, int world, std::uint64_t seed) {
  check_world(world);
  Rng rng(seed, stream::kPartition);
  const std::vector<std::size_t> perm = shuffled_range(n, rng);
  std::vector<std::vector<std::size_t>> shards(world);
  for (std::size_t i = 0; i < n; ++i) shards[i % world].push_back(perm[i]);
  return shards;
}

std::vector<std::vector<std::size_t>> dirichlet_partition(std::span<const std::int32_t> labels,
                                                          int num_classes, int world, double alpha,
                                                          std::uint64_t seed) {
  check_world(world);
  if (!(alpha > 0.0)) fail(Code::invalid_argument, "dirichlet alpha must be > 0");
  std::vector<std::vector<std::size_t>> by_class(num_classes);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    DPG_CHECK(labels[i] >= 0 && labels[i] < num_classes);
    by_class[labels[i]].push_back(i);
  }
  Rng rng(seed, stream::kPartition);
  std::vector<std::vector<std::size_t>> shards(world);
  std::vector<double> p(world);
  for (auto& members : by_class) {
    rng.shuffle(std::span<std::size_t>(members));
    double total = 0.0;
    for (double& x : p) total += (x = rng.gamma(alpha));
    if (total == 0.0) {  // every draw underflowed (tiny alpha): one peer takes the class
      std::fill(p.begin(), p.end(), 0.0);
      p[rng.below(world)] = total = 1.0;
    }
    const std::size_t n = members.size();
    std::size_t begin = 0;
    double cumulative = 0.0;
    for (int r = 0; r < world; ++r) {
      cumulative += p[r] / total;
      const std::size_t end =
          r == world - 1 ? n : std::min(n, static_cast<std::size_t>(std::floor(cumulative * n)));
      for (std::size_t i = begin; i < std::max(begin, end); ++i) shards[r].push_back(members[i]);
      begin = std::max(begin, end);
    }
  }
  for (auto& shard : shards) std::sort(shard.begin(), shard.end());
  return shards;
}

std::vector<std::vector<std::size_t>> make_partition(const PartitionSpec& spec,
                                                     std::span<const std::int32_t> labels,
                                                     int num_classes, int world,
                                                     std::uint64_t seed) {
  std::vector<std::vector<std::size_t>> shards =
      spec.kind == PartitionSpec::Kind::iid
          ? iid_partition(labels.size(), world, seed)
          : dirichlet_partition(labels, num_classes, world, spec.alpha, seed);
  for (std::size_t r = 0; r < shards.size(); ++r) {
    if (!shards[r].empty()) continue;
    if (spec.kind == PartitionSpec::Kind::iid) {
      fail(Code::invalid_argument, "partition iid: " + std::to_string(world) + " peers but only " +
                                       std::to_string(labels.size()) + " training rows; peer " +
                                       std::to_string(r) + " would get none (use fewer peers)");
    }
    std::ostringstream alpha;
    alpha << spec.alpha;
    fail(Code::invalid_argument, "partition dirichlet:" + alpha.str() + " left peer " +
                                     std::to_string(r) + " of " + std::to_string(world) +
                                     " with no examples; use a larger alpha (or fewer peers)");
  }
  return shards;
}

}  // namespace dpg::data
