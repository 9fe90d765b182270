#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/data/partition.h"
#include "tests/unit/data/data_test_util.h"

using namespace dpg::data;
using namespace dpg::data::testing;

namespace {

using Shards = std::vector<std::vector<std::size_t>>;

// Every index of [0, n) appears in exactly one shard.
bool disjoint_cover(const Shards& shards, std::size_t n) {
  std::vector<int> seen(n, 0);
  for (const auto& s : shards) {
    for (std::size_t i : s) {
      if (i >= n || seen[i]++ != 0) return false;
    }
  }
  return std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; });
}

std::vector<std::int32_t> balanced_labels(int classes, int per_class) {
  std::vector<std::int32_t> labels;
  for (int k = 0; k < per_class; ++k) {
    for (int c = 0; c < classes; ++c) labels.push_back(c);
  }
  return labels;
}

// Mean over shards of the total-variation distance between the shard's label distribution and
// the uniform one: 0 for perfectly balanced shards, near 1 - 1/classes for single-class shards.
double skew(const Shards& shards, const std::vector<std::int32_t>& labels, int classes) {
  double total = 0.0;
  for (const auto& s : shards) {
    std::vector<double> h(classes, 0.0);
    for (std::size_t i : s) h[labels[i]] += 1.0;
    double tv = 0.0;
    for (double c : h) tv += std::abs(c / static_cast<double>(s.size()) - 1.0 / classes);
    total += tv / 2.0;
  }
  return total / static_cast<double>(shards.size());
}

}  // namespace

TEST_CASE("iid: a disjoint cover, sizes within 1, reproducible, equal to iid_indices") {
  for (std::size_t n : {0u, 1u, 7u, 100u, 101u, 1000u}) {
    for (int world : {1, 2, 3, 8}) {
      CAPTURE(n);
      CAPTURE(world);
      const Shards a = iid_partition(n, world, 42);
      REQUIRE(a.size() == static_cast<std::size_t>(world));
      CHECK(disjoint_cover(a, n));
      std::size_t lo = n, hi = 0;
      for (const auto& s : a) {
        lo = std::min(lo, s.size());
        hi = std::max(hi, s.size());
      }
      CHECK(hi - lo <= 1);
      CHECK(iid_partition(n, world, 42) == a);
      for (int r = 0; r < world; ++r) CHECK(iid_indices(n, r, world, 42) == a[r]);
    }
  }
  CHECK(iid_partition(1000, 4, 1) != iid_partition(1000, 4, 2));
  // DistributedSampler order: shard r takes positions r, r + world, ... of one permutation.
  const Shards one = iid_partition(10, 1, 5);
  const Shards three = iid_partition(10, 3, 5);
  CHECK(three[1] == std::vector<std::size_t>{one[0][1], one[0][4], one[0][7]});
}

TEST_CASE("iid: bad rank or world, and more peers than rows, are invalid_argument") {
  CHECK_THROWS_AS(iid_indices(10, 3, 3, 0), dpg::Error);
  CHECK_THROWS_AS(iid_indices(10, -1, 3, 0), dpg::Error);
  CHECK_THROWS_AS(iid_indices(10, 0, 0, 0), dpg::Error);
  const std::vector<std::int32_t> labels = {0, 1, 0};
  const std::string msg = error_of([&] { make_partition({}, labels, 2, 4, 0); });
  CHECK(contains(msg, "peer 3"));
}

TEST_CASE("dirichlet: a disjoint cover, reproducible, more skewed for small alpha") {
  const int classes = 10;
  const auto labels = balanced_labels(classes, 200);
  const Shards small = dirichlet_partition(labels, classes, 8, 0.1, 3);
  const Shards large = dirichlet_partition(labels, classes, 8, 100.0, 3);
  CHECK(disjoint_cover(small, labels.size()));
  CHECK(disjoint_cover(large, labels.size()));
  CHECK(dirichlet_partition(labels, classes, 8, 0.1, 3) == small);
  CHECK(dirichlet_partition(labels, classes, 8, 0.1, 4) != small);
  const double s_small = skew(small, labels, classes);
  const double s_large = skew(large, labels, classes);
  CAPTURE(s_small);
  CAPTURE(s_large);
  CHECK(s_small > 0.4);
  CHECK(s_large < 0.1);
  for (const auto& s : small) CHECK(std::is_sorted(s.begin(), s.end()));
  // One peer gets everything.
  CHECK(dirichlet_partition(labels, classes, 1, 0.5, 0)[0].size() == labels.size());
}

TEST_CASE("dirichlet: an empty shard is an error suggesting a larger alpha") {
  const auto labels = balanced_labels(10, 20);
  const std::string msg =
      error_of([&] { make_partition(parse_partition("dirichlet:0.01"), labels, 10, 50, 0); });
  CHECK(contains(msg, "dirichlet:0.01"));
  CHECK(contains(msg, "larger alpha"));
}

TEST_CASE("parse_partition accepts iid and dirichlet:ALPHA > 0 only") {
  CHECK(parse_partition("iid").kind == PartitionSpec::Kind::iid);
  const PartitionSpec d = parse_partition("dirichlet:0.5");
  CHECK(d.kind == PartitionSpec::Kind::dirichlet);
  CHECK(d.alpha == 0.5);
  for (const char* bad : {"dirichlet:0", "dirichlet:-1", "dirichlet:", "dirichlet:abc",
                          "dirichlet:1x", "dirichlet:inf", "Iid", "shards"}) {
    CAPTURE(bad);
    dpg::Code code{};
    const std::string msg = error_of([&] { parse_partition(bad); }, &code);
    CHECK(code == dpg::Code::invalid_argument);
    CHECK(contains(msg, bad));
  }
}
