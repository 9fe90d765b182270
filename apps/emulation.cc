#include "apps/emulation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <utility>

#include "runtime/core/bounds.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/core/wire.h"
#include "runtime/net/link_probe.h"
#include "runtime/net/shaped_transport.h"
#include "runtime/data/peer_data.h"
#include "runtime/train/balance.h"
#include "runtime/train/run_state.h"

namespace dpg::app {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kSlowdownReps = 5;
constexpr int kSpeedWindows = 2;  // windows each peer times in its slot
// A window repeats the probe's pass for at least this long: three periods of the kernel's CFS
// bandwidth control (100 ms by default), so that a peer held by a CPU quota (a container's
// limit, a cgroup's cpu.cfs_quota_us) is measured at its throttled speed. A single short pass
// fits in the quota's budget and runs at full speed: 4 peers, one at an eighth of a core, were
// measured within 12% of each other that way.
constexpr double kWindowSeconds = 0.3;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

void add_network_flags(CLI::App& cmd, EmulationFlags& f, bool slowdown) {
  cmd.add_option("--network", f.network,
                 "network file: each link's latency, jitter, bandwidth and loss, emulated on the "
                 "sending side (docs/HETEROGENEITY.md)");
  cmd.add_option("--link", f.links,
                 "one link (or default): A-B:latency=5ms,bw=100Mbit,jitter=1ms,loss=0.1% "
                 "(repeatable; over --network)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  if (!slowdown) return;
  cmd.add_option("--slowdown", f.slowdown,
                 "a slow peer: RANK:FACTOR, RANK:FACTOR@epoch:E or @step:S, or "
                 "RANK:stall=2s/100 (a pause every 100 steps); repeatable")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

std::vector<std::string> network_args(const EmulationFlags& f) {
  std::vector<std::string> args;
  if (!f.network.empty()) {
    args.push_back("--network");
    args.push_back(std::filesystem::absolute(f.network).string());
  }
  for (const std::string& l : f.links) {
    args.push_back("--link");
    args.push_back(l);
  }
  return args;
}

net::NetworkShape network_of(const EmulationFlags& f, int world) {
  net::NetworkShape n;
  if (!f.network.empty()) n = net::load_network(f.network);
  for (const std::string& l : f.links) net::apply_link_flag(n, l);
  n.check_ranks(world, f.network.empty() ? "--link" : f.network + " and --link");
  return n;
}

std::vector<train::Slowdown> slowdowns_of(const EmulationFlags& f, int world) {
  std::vector<train::Slowdown> out;
  for (const std::string& s : f.slowdown) out.push_back(train::parse_slowdown(s));
  train::check_slowdown_ranks(out, world);
  return out;
}

std::unique_ptr<net::Transport> shape_links(net::Transport& inner,
                                            const net::NetworkShape& network) {
  if (!network.any()) return nullptr;
  return std::make_unique<net::ShapedTransport>(inner, network);
}

std::vector<std::pair<int, int>> links_to_probe(const net::NetworkShape& network, int world,
                                                const std::function<bool(int, int)>& connected) {
  std::vector<std::pair<int, int>> out;
  auto add = [&](int a, int b) {
    if (a >= world || b >= world || !network.between(a, b).shaped()) return;
    if (!connected(a, b) || !connected(b, a)) return;
    if (std::find(out.begin(), out.end(), std::pair{a, b}) == out.end()) out.emplace_back(a, b);
  };
  if (network.fallback.over({}).shaped()) add(0, 1);
  for (const auto& [pair, spec] : network.links) add(pair.first, pair.second);
  return out;
}

std::vector<net::ProbeResult> probe_pairs(collective::Communicator& comm, net::Transport& t,
                                          const net::NetworkShape& network,
                                          const std::vector<std::pair<int, int>>& pairs,
                                          double bulk_seconds, net::ProbeOptions o) {
  const int me = comm.rank();
  constexpr std::size_t kFields = 4;
  std::vector<double> figures(pairs.size() * kFields, 0.0);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto [a, b] = pairs[i];
    if (me != a && me != b) continue;
    o.bulk_bytes = net::bulk_bytes_for(network.between(a, b), bulk_seconds);
    const net::ProbeResult r = net::probe_link(t, me == a ? b : a, me == a, o);
    if (me != a) continue;
    figures[i * kFields + 0] = static_cast<double>(r.one_way.count());
    figures[i * kFields + 1] = static_cast<double>(r.min_one_way.count());
    figures[i * kFields + 2] = static_cast<double>(r.max_one_way.count());
    figures[i * kFields + 3] = r.bits_per_second;
  }
  // The figures are timings of synthetic messages: public.
  comm.allreduce(public_value(std::span<double>(figures)));
  std::vector<net::ProbeResult> out(pairs.size());
  auto ns = [](double v) { return std::chrono::nanoseconds(std::llround(v)); };
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    out[i].one_way = ns(figures[i * kFields + 0]);
    out[i].min_one_way = ns(figures[i * kFields + 1]);
    out[i].max_one_way = ns(figures[i * kFields + 2]);
    out[i].bits_per_second = figures[i * kFields + 3];
  }
  return out;
}

std::vector<std::string> probe_links(collective::Communicator& comm, net::Transport& shaped,
                                     const net::NetworkShape& network,
                                     const std::vector<std::pair<int, int>>& pairs,
                                     double bulk_seconds) {
  const std::vector<net::ProbeResult> results =
      probe_pairs(comm, shaped, network, pairs, bulk_seconds);
  std::vector<std::string> lines;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto [a, b] = pairs[i];
    lines.push_back("link " + std::to_string(a) + "-" + std::to_string(b) + ": " +
                    net::delivered_text(network.between(a, b), results[i]));
    if (comm.rank() == 0) DPG_INFO("emulated " << lines.back());
  }
  return lines;
}

std::vector<std::string> probe_slowdowns(collective::Communicator& comm, const TrainConfig& c,
                                         const data::Dataset& shape,
                                         const std::vector<train::Slowdown>& slowdown) {
  const int me = comm.rank(), world = comm.world();
  std::vector<double> figures(static_cast<std::size_t>(world) * 2, 0.0);
  // The largest factor this peer will have (every factor and stall uses the same pause).
  double asked = 1;
  for (const auto& s : slowdown) {
    if (s.rank == me && s.every == 0) asked = std::max(asked, s.factor);
  }
  if (asked > 1) {
    const train::Straggler slow({{.rank = me, .factor = asked}}, me, 1.0);
    const auto rows = static_cast<std::size_t>(
        std::clamp(std::round(c.batch_size / world), 1.0, 65536.0));
    train::SpeedProbe plain(c, train::spec_for(c, shape), rows, nullptr);
    train::SpeedProbe stretched(c, train::spec_for(c, shape), rows, &slow);
    std::vector<double> plain_s, slow_s;
    for (int i = 0; i < kSlowdownReps; ++i) {
      plain_s.push_back(plain.pass());
      slow_s.push_back(stretched.pass());
    }
    figures[static_cast<std::size_t>(me) * 2] = asked;
    figures[static_cast<std::size_t>(me) * 2 + 1] = median(slow_s) / median(plain_s);
  }
  comm.allreduce(public_value(std::span<double>(figures)));
  std::vector<std::string> lines;
  for (int r = 0; r < world; ++r) {
    const double a = figures[static_cast<std::size_t>(r) * 2];
    if (a <= 1) continue;
    lines.push_back("rank " + std::to_string(r) + ": asked " + fixed_text(a, 2) +
                    "x slower compute, delivered " +
                    fixed_text(figures[static_cast<std::size_t>(r) * 2 + 1], 2) + "x");
    if (me == 0) DPG_INFO("emulated slow peer " << lines.back());
  }
  return lines;
}

// This peer's speed (examples/s), measured in a time slot of its own: one pass each at once
// (an overestimate of a pass, under contention) sizes the slots; then each peer measures in its
// slot while the others sleep, so peers that share a machine's cores do not slow each other's
// measurement (a peer waiting on the network may poll). The fastest pass counts: interference
// only ever slows one.
namespace {

// Passes of `probe` until kWindowSeconds have gone by: {seconds per pass, seconds taken}.
std::pair<double, double> timed_window(train::SpeedProbe& probe) {
  const auto t0 = Clock::now();
  int passes = 0;
  double elapsed = 0;
  do {
    probe.pass();
    ++passes;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (elapsed < kWindowSeconds);
  return {elapsed / passes, elapsed};
}

}  // namespace

double measure_alone(collective::Communicator& comm, const TrainConfig& c,
                     const data::Prepared& data, std::size_t rows,
                     const train::Straggler& straggler) {
  const int me = comm.rank(), world = comm.world();
  train::SpeedProbe probe(c, train::spec_for(c, data.train), rows,
                          straggler.active() ? &straggler : nullptr);
  probe.pass();  // warms the caches and the allocator
  std::vector<double> first(static_cast<std::size_t>(world), 0.0);
  first[static_cast<std::size_t>(me)] = timed_window(probe).second;
  comm.allreduce(public_value(std::span<double>(first)));  // timings of synthetic work
  const double longest = *std::max_element(first.begin(), first.end());
  const auto slot = std::chrono::duration<double>(kSpeedWindows * longest * 1.5 + 0.02);
  comm.barrier();
  // Slot 0 is left empty: a peer measured right after the barrier was found at 0.6 of its
  // speed (the others still settling), whichever rank held the first slot. Peer r measures in
  // slot r + 1.
  const auto t0 = Clock::now();
  std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(slot * (me + 1)));
  const auto end = t0 + std::chrono::duration_cast<Clock::duration>(slot * (me + 2));
  auto [best, took] = timed_window(probe);
  for (int i = 1; i < kSpeedWindows && Clock::now() + std::chrono::duration<double>(took) < end;
       ++i) {
    const auto [per_pass, t] = timed_window(probe);
    best = std::min(best, per_pass);
    took = t;
  }
  std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(slot * (world + 1)));
  comm.barrier();
  return static_cast<double>(rows) / std::max(best, 1e-9);
}

Json Balanced::to_json() const {
  Json j{{"speeds", speeds}, {"shares", shares}, {"rows", rows},
         {"mode", moved ? "rows moved, one sampling rate" : "rates, rows in place"}};
  if (!later.empty()) j["later"] = later;
  return j;
}

namespace {

// Every peer's speed at the start of the epoch whose first step is `step`, each slowed by its
// --slowdown factor there; `shape` gives the rows' inputs and classes.
std::vector<double> speeds_at(collective::Communicator& comm, const TrainConfig& c,
                              const std::vector<train::Slowdown>& slowdown, long long step,
                              const data::Dataset& shape, std::size_t total) {
  const int me = comm.rank(), world = comm.world();
  // The factor this peer has at `step` (one epoch is total / batch_size steps).
  const train::Straggler schedule(slowdown, me, static_cast<double>(total) / c.batch_size);
  const double factor = schedule.factor_at(step);
  const train::Straggler now({{.rank = me, .factor = factor}}, me, 1.0);
  const auto calibration = static_cast<std::size_t>(
      std::clamp(std::round(c.batch_size / world), 1.0, 65536.0));
  data::Prepared probe_shape;
  probe_shape.train = shape;
  return train::all_speeds(comm, measure_alone(comm, c, probe_shape, calibration, now));
}

std::size_t total_of(const std::vector<std::size_t>& rows) {
  std::size_t total = 0;
  for (std::size_t r : rows) total += r;
  return total;
}

}  // namespace

std::vector<double> rerate_peers(collective::Communicator& comm, const TrainConfig& c,
                                 const std::vector<train::Slowdown>& slowdown, int epoch,
                                 long long step, const data::Dataset& shape, Balanced& b) {
  const int world = comm.world();
  b.speeds = speeds_at(comm, c, slowdown, step, shape, total_of(b.rows));
  const std::vector<double> rows(b.rows.begin(), b.rows.end());
  b.shares = train::cap_shares(train::shares_of(b.speeds), rows, c.batch_size, b.rate_cap);
  std::vector<double> rates;
  for (int j = 0; j < world; ++j) {
    const auto k = static_cast<std::size_t>(j);
    rates.push_back(std::min(b.rate_cap, c.batch_size * b.shares[k] / rows[k]));
  }
  b.later.push_back(Json{{"epoch", epoch}, {"speeds", b.speeds}, {"shares", b.shares},
                         {"peer_q", rates}});
  if (comm.rank() == 0) {
    std::string s;
    for (int j = 0; j < world; ++j) {
      const auto k = static_cast<std::size_t>(j);
      s += (j ? "; " : "") + std::string("rank ") + std::to_string(j) + " " +
           fixed_text(b.speeds[k], 0) + " examples/s, share " + fixed_text(b.shares[k], 3) +
           ", rate " + fixed_text(rates[k], 5);
    }
    DPG_INFO("balance at epoch " << epoch << " (rates, rows in place, capped at "
                                 << fixed_text(b.rate_cap, 5) << "): " << s);
  }
  return rates;
}

data::Dataset rebalance_rows(collective::Communicator& comm, const TrainConfig& c,
                             const std::vector<train::Slowdown>& slowdown, int epoch,
                             long long step, const data::Dataset& shape, Balanced& b) {
  const int me = comm.rank(), world = comm.world();
  const std::size_t total = total_of(b.rows);
  b.speeds = speeds_at(comm, c, slowdown, step, shape, total);
  b.shares = train::shares_of(b.speeds);
  b.rows = train::row_counts(total, b.shares);
  for (int j = 0; j < world; ++j) {
    b.shares[static_cast<std::size_t>(j)] =
        static_cast<double>(b.rows[static_cast<std::size_t>(j)]) / static_cast<double>(total);
  }
  b.later.push_back(Json{{"epoch", epoch}, {"speeds", b.speeds}, {"rows", b.rows}});
  if (me == 0) {
    std::string s;
    for (int j = 0; j < world; ++j) {
      s += (j ? "; " : "") + std::string("rank ") + std::to_string(j) + " " +
           fixed_text(b.speeds[static_cast<std::size_t>(j)], 0) + " examples/s, " +
           std::to_string(b.rows[static_cast<std::size_t>(j)]) + " rows";
    }
    DPG_INFO("balance at epoch " << epoch << ": " << s);
  }
  return data::load_counted(c.data, me, b.rows, c.seed).train;
}

Balanced balance_peers(collective::Communicator& comm, const TrainConfig& c,
                       data::Prepared& data, const std::vector<train::Slowdown>& slowdown) {
  const int me = comm.rank(), world = comm.world();
  const train::Straggler straggler(slowdown, me, 1.0);  // its factor from the start
  // The calibration batch: the expected per-peer batch of an even split, the same on every peer.
  const auto rows = static_cast<std::size_t>(
      std::clamp(std::round(c.batch_size / world), 1.0, 65536.0));
  Balanced b;
  b.speeds = train::all_speeds(comm, measure_alone(comm, c, data, rows, straggler));
  b.shares = train::shares_of(b.speeds);
  std::vector<double> held(static_cast<std::size_t>(world), 0.0);
  held[static_cast<std::size_t>(me)] = static_cast<double>(data.train.rows);
  comm.allreduce(public_value(std::span<double>(held)));  // shard sizes: public
  double total = 0;
  for (double r : held) total += r;
  b.moved = data::prepared_whole(c.data);
  if (b.moved) {
    b.rows = train::row_counts(static_cast<std::size_t>(total), b.shares);
    data = data::load_counted(c.data, me, b.rows, c.seed);
    // The shares the rows give, exactly: every peer then samples at batch_size / total.
    for (int j = 0; j < world; ++j) {
      b.shares[static_cast<std::size_t>(j)] = static_cast<double>(b.rows[static_cast<std::size_t>(j)]) / total;
    }
  } else {
    for (double r : held) b.rows.push_back(static_cast<std::size_t>(r));
    if (c.balance_every > 0) {
      // The rates will change at later epochs: each stays under a cap the noise is calibrated
      // for, from the start on (a multiple of the global rate, at most 1).
      b.rate_cap = std::min(1.0, c.balance_rate_cap * c.batch_size / total);
      b.shares = train::cap_shares(b.shares, held, c.batch_size, b.rate_cap);
    }
  }
  if (me == 0) {
    std::string s;
    for (int j = 0; j < world; ++j) {
      s += (j ? "; " : "") + std::string("rank ") + std::to_string(j) + " " +
           fixed_text(b.speeds[static_cast<std::size_t>(j)], 0) + " examples/s, share " +
           fixed_text(b.shares[static_cast<std::size_t>(j)], 3) + ", " +
           std::to_string(b.rows[static_cast<std::size_t>(j)]) + " rows";
    }
    DPG_INFO("balance: " << (b.moved ? "rows re-sharded by speed (every peer samples at the "
                                       "global rate): "
                                     : "each peer's rate set by its speed (its rows stay): ")
                         << s);
  }
  return b;
}

}  // namespace dpg::app
