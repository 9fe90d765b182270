// The load balancer's arithmetic (runtime/train/balance.h) and its calibration work, and the
// rows it re-shards (counted_indices): disjoint, covering, in proportion.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "runtime/core/error.h"
#include "runtime/data/dataset.h"
#include "runtime/train/balance.h"

using dpg::train::row_counts;
using dpg::train::shares_of;

TEST_CASE("shares follow the speeds, with a floor for a peer nearly stopped") {
  const auto s = shares_of({300, 300, 300, 75});
  CHECK(s[0] == doctest::Approx(300.0 / 975));
  CHECK(s[3] == doctest::Approx(75.0 / 975));
  CHECK(std::accumulate(s.begin(), s.end(), 0.0) == doctest::Approx(1.0));
  const auto floored = shares_of({1000, 1000, 1000, 0.001});
  CHECK(floored[3] == doctest::Approx(0.0125 / 1.0125).epsilon(1e-6));  // 5% of an even share
  CHECK(std::accumulate(floored.begin(), floored.end(), 0.0) == doctest::Approx(1.0));
  CHECK_THROWS_AS(shares_of({1, 0}), dpg::Error);
  CHECK_THROWS_AS(shares_of({}), dpg::Error);
}

TEST_CASE("row counts add up and follow the shares") {
  const auto c = row_counts(60000, {0.3, 0.3, 0.3, 0.1});
  CHECK(std::accumulate(c.begin(), c.end(), std::size_t{0}) == 60000);
  CHECK(c[3] >= 5999);
  CHECK(c[3] <= 6001);
  const auto tiny = row_counts(5, {0.97, 0.01, 0.01, 0.01});
  CHECK(std::accumulate(tiny.begin(), tiny.end(), std::size_t{0}) == 5);
  for (auto n : tiny) CHECK(n >= 1);
  CHECK_THROWS_AS(row_counts(3, {0.25, 0.25, 0.25, 0.25}), dpg::Error);
}

TEST_CASE("counted shards are disjoint and cover every row") {
  const std::vector<std::size_t> counts = {40, 25, 30, 5};
  std::set<std::size_t> seen;
  for (int r = 0; r < 4; ++r) {
    const auto mine = dpg::data::counted_indices(100, r, counts, 7);
    CHECK(mine.size() == counts[static_cast<std::size_t>(r)]);
    for (auto i : mine) CHECK(seen.insert(i).second);
  }
  CHECK(seen.size() == 100);
  CHECK(dpg::data::counted_indices(100, 1, counts, 7) ==
        dpg::data::counted_indices(100, 1, counts, 7));
  CHECK_THROWS_AS(dpg::data::counted_indices(99, 0, counts, 7), dpg::Error);
  CHECK_THROWS_AS(dpg::data::counted_indices(100, 4, counts, 7), dpg::Error);
}

TEST_CASE("the calibration work is stretched by the peer's slowdown") {
  dpg::TrainConfig c;
  dpg::model::MlpSpec spec;
  spec.inputs = 64;
  spec.hidden = {32};
  spec.classes = 10;
  const dpg::train::Straggler slow({dpg::train::parse_slowdown("0:3")}, 0, 1.0);
  dpg::train::SpeedProbe plain(c, spec, 256, nullptr), stretched(c, spec, 256, &slow);
  double p = 1e9, s = 1e9;
  for (int i = 0; i < 5; ++i) {
    p = std::min(p, plain.pass());
    s = std::min(s, stretched.pass());
  }
  // The stretched pass pauses twice its own work after it (a sleep is never shorter than
  // asked): about 3x the plain pass, here with room for the two passes' own spread.
  CHECK(s >= 2.5 * p);
}
