// Process groups and the hierarchical all-reduce over the in-process transport: split's
// membership and order, collectives on a subset beside the parent's, tag spaces that never meet,
// and the hierarchical result against the flat one on emulated hosts.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "runtime/collective/communicator.h"
#include "runtime/collective/group.h"
#include "runtime/collective/hierarchical.h"
#include "runtime/core/error.h"
#include "runtime/net/inproc/inproc_transport.h"
#include "tests/unit/collective/world.h"

using dpg::public_value;  // the tests' buffers are synthetic

using dpg::collective::Communicator;
using dpg::collective::Hierarchy;
using dpg::collective::Options;
using dpg::collective::Reduce;

namespace {

using dpg::test::run_world;

// Integer-valued inputs (exact in float in any order of addition), different on every rank.
std::vector<float> integer_input(int rank, std::size_t count) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = float((rank * 7 + int(i) * 13) % 101) - 50.0f;
  return v;
}

}  // namespace

TEST_CASE("split: colours make groups, keys order them, a negative colour joins none") {
  const int n = 6;
  std::vector<std::vector<int>> members(n);
  std::vector<int> group_rank(n, -2), group_world(n, -2);
  run_world(n, {}, [&](Communicator& c) {
    const int r = c.rank();
    // Odd ranks in one group ordered by descending rank; even ranks but 4 in another; 4 alone out.
    const int colour = r == 4 ? -1 : r % 2;
    auto g = dpg::collective::split(c, colour, r % 2 ? -r : r);
    if (!g) return;
    members[r] = g->members();
    group_rank[r] = g->comm().rank();
    group_world[r] = g->comm().world();
  });
  CHECK(members[1] == std::vector<int>{5, 3, 1});
  CHECK(members[0] == std::vector<int>{0, 2});
  CHECK(group_rank[5] == 0);
  CHECK(group_rank[1] == 2);
  CHECK(group_world[2] == 2);
  CHECK(members[4].empty());
  CHECK(group_rank[4] == -2);
}

TEST_CASE("groups: collectives on each subset, interleaved with the parent's") {
  for (std::size_t count : {std::size_t{1}, std::size_t{37}, std::size_t{5000}}) {
    CAPTURE(count);
    const int n = 6;
    std::vector<std::vector<float>> sub(n), all(n);
    std::vector<std::vector<int>> gathered(n);
    Options o;
    o.segment_bytes = 64;  // many segments per block
    run_world(n, o, [&](Communicator& c) {
      const int r = c.rank();
      auto g = dpg::collective::split(c, r / 3, r);  // {0,1,2} and {3,4,5}
      auto h = dpg::collective::split(c, r % 2, r);  // {0,2,4} and {1,3,5}: a second tag space
      std::vector<float> a(count, float(r)), b(count, float(r + 1)), p(count, 1.0f);
      g->comm().allreduce(public_value(a));
      c.allreduce(public_value(p));
      h->comm().allreduce(public_value(b));
      int mine = r * 10;
      std::vector<int> out(3);
      h->comm().allgather(public_value(std::as_bytes(std::span(&mine, 1))), std::as_writable_bytes(std::span(out)));
      g->comm().barrier();
      int root_value = r;
      g->comm().broadcast(public_value(std::as_writable_bytes(std::span(&root_value, 1))), 2);
      CHECK(root_value == (r / 3) * 3 + 2);
      sub[r] = a;
      sub[r].push_back(b[0]);
      all[r] = p;
      gathered[r] = out;
    });
    for (int r = 0; r < n; ++r) {
      const float want = r < 3 ? 0 + 1 + 2 : 3 + 4 + 5;
      for (std::size_t i = 0; i < count; ++i) REQUIRE(sub[r][i] == want);
      CHECK(sub[r][count] == float(r % 2 ? 2 + 4 + 6 : 1 + 3 + 5));
      CHECK(all[r] == std::vector<float>(count, float(n)));
      CHECK(gathered[r] == (r % 2 ? std::vector<int>{10, 30, 50} : std::vector<int>{0, 20, 40}));
    }
  }
}

TEST_CASE("reduce_scatter then allgather_blocks is the all-reduce") {
  for (int n : {2, 3, 5}) {
    for (std::size_t count : {std::size_t{1}, std::size_t{4}, std::size_t{1001}}) {
      CAPTURE(n);
      CAPTURE(count);
      std::vector<std::vector<float>> got(n), flat(n);
      Options o;
      o.segment_bytes = 12;
      o.scratch_slots = 2;
      run_world(n, o, [&](Communicator& c) {
        auto v = integer_input(c.rank(), count);
        auto w = v;
        c.reduce_scatter(public_value(v));
        const auto [b, e] = c.owned_block(count);
        c.allreduce(public_value(w));
        for (std::size_t i = b; i < e; ++i) REQUIRE(v[i] == w[i]);
        c.allgather_blocks(public_value(v));
        got[c.rank()] = v;
        flat[c.rank()] = w;
      });
      for (int r = 0; r < n; ++r) CHECK(got[r] == flat[0]);
    }
  }
}

TEST_CASE("hierarchical all-reduce on emulated 2 hosts x 4 peers equals the flat one exactly") {
  const std::vector<int> host_of = {0, 0, 0, 0, 1, 1, 1, 1};
  for (std::size_t count : {std::size_t{3}, std::size_t{1000}, std::size_t{1 << 18}}) {
    CAPTURE(count);
    std::vector<std::vector<float>> hier(8), flat(8), avg(8);
    run_world(8, {}, [&](Communicator& c) {
      Hierarchy h(c, host_of);
      auto v = integer_input(c.rank(), count);
      auto w = v;
      auto a = v;
      h.allreduce(public_value(v));
      c.allreduce(public_value(w));
      h.allreduce(public_value(a), Reduce::average);
      hier[c.rank()] = v;
      flat[c.rank()] = w;
      avg[c.rank()] = a;
    });
    for (int r = 0; r < 8; ++r) {
      CHECK(hier[r] == flat[r]);
      CHECK(avg[r] == avg[0]);  // bitwise the same on every peer
    }
    // The average of integers over 8 (a power of two) is exact too.
    for (std::size_t i = 0; i < count; ++i) REQUIRE(avg[0][i] == flat[0][i] / 8.0f);
  }
}

TEST_CASE("hierarchical all-reduce: interleaved hosts, uneven hosts, random data") {
  // Hosts given out of rank order (0 1 0 1 ...) and uneven ones (3 + 1 + 2 peers).
  for (const auto& host_of : {std::vector<int>{0, 1, 0, 1, 0, 1}, std::vector<int>{7, 7, 3, 7, 9, 9}}) {
    const int n = static_cast<int>(host_of.size());
    std::vector<std::vector<double>> hier(n), flat(n);
    run_world(n, {}, [&](Communicator& c) {
      Hierarchy h(c, host_of);
      std::mt19937 rng(static_cast<unsigned>(c.rank()) + 11);
      std::normal_distribution<double> d;
      std::vector<double> v(777);
      for (auto& x : v) x = d(rng);
      auto w = v;
      h.allreduce(public_value(v), Reduce::average);
      c.allreduce(public_value(w), Reduce::average);
      hier[c.rank()] = v;
      flat[c.rank()] = w;
    });
    for (int r = 0; r < n; ++r) {
      CHECK(hier[r] == hier[0]);
      for (std::size_t i = 0; i < hier[r].size(); ++i) REQUIRE(hier[r][i] == doctest::Approx(flat[r][i]).epsilon(1e-12));
    }
  }
}

TEST_CASE("hierarchical_peers: the ranks the two groups talk to") {
  Options o;
  o.small_bytes = 0;
  o.medium_bytes = 0;  // the ring only
  const std::vector<int> host_of = {0, 0, 0, 0, 1, 1, 1, 1};
  auto p = dpg::collective::hierarchical_peers(5, host_of, o);
  std::sort(p.begin(), p.end());
  CHECK(p == std::vector<int>{1, 4, 6});  // ring neighbours 4, 6 on its host; 1 across
  const auto layout = dpg::collective::host_layout({2, 2, 5});
  CHECK_FALSE(layout.even);
  CHECK(layout.cross(1).empty());
  CHECK(layout.cross(2) == std::vector<int>{0, 2});
}

TEST_CASE("split: a dead member fails the group's collective naming it, within the timeout") {
  const auto errors = dpg::test::run_transports_errors(
      4, std::chrono::milliseconds(500), [](int r, dpg::net::Transport& t) {
        Communicator c(t);
        auto g = dpg::collective::split(c, 0, r);
        if (r == 2) return;  // leaves before the group's all-reduce
        std::vector<float> v(1000, 1.0f);
        g->comm().allreduce(public_value(v));
      });
  // Nobody hangs; on the ring 0-1-2-3, 3 receives from 2 and names it, in parent ranks.
  for (int r : {0, 1, 3}) CHECK(errors[r] != "");
  CAPTURE(errors[3]);
  CHECK(errors[3].find("peer 2") != std::string::npos);
}
