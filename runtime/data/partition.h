// How the training split is divided among peers. All randomness comes from
// dpg::Rng(seed, stream::kPartition), so every peer computes the same partition on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"

namespace dpg::data {

struct PartitionSpec {
  enum class Kind { iid, dirichlet } kind = Kind::iid;
  double alpha = 0.0;  // dirichlet only, > 0
};

// Parses "iid" or "dirichlet:ALPHA" (ALPHA > 0); throws invalid_argument otherwise.
PartitionSpec parse_partition(const std::string& text);

// The training rows held out for validation (`rows` of `n`, a seeded random choice on a stream of
// its own, so the partition's permutation is unchanged) and those left to train on, each in file
// order. Throws invalid_argument when no training row would be left.
struct ValidationSplit {
  std::vector<std::size_t> validation, train;
};
ValidationSplit split_validation(std::size_t n, std::size_t rows, std::uint64_t seed);

// All `world` iid shards at once: shard r equals iid_indices(n, r, world, seed).
std::vector<std::vector<std::size_t>> iid_partition(std::size_t n, int world, std::uint64_t seed);

// Non-iid by label: per class, proportions ~ Dirichlet(alpha) over the peers split the class's
// shuffled indices. Each shard is sorted ascending. Labels must lie in [0, num_classes).
std::vector<std::vector<std::size_t>> dirichlet_partition(std::span<const std::int32_t> labels,
                                                          int num_classes, int world, double alpha,
                                                          std::uint64_t seed);

// Dispatches on the spec, then checks every shard is non-empty (invalid_argument otherwise, with
// a hint: a larger alpha, or fewer peers).
std::vector<std::vector<std::size_t>> make_partition(const PartitionSpec& spec,
                                                     std::span<const std::int32_t> labels,
                                                     int num_classes, int world,
                                                     std::uint64_t seed);

}  // namespace dpg::data
