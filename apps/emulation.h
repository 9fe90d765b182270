// A run's emulated network and slow peers, from --network FILE, --link SPEC (repeatable) and
// --slowdown SPEC (repeatable): the flags of `train`, `bench allreduce` and `bench link`, the
// shaped transport over whatever transport_setup picked, and what each emulation delivers,
// measured at the start of a run and printed by rank 0 beside what was asked.
// docs/HETEROGENEITY.md.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/collective/communicator.h"
#include "runtime/core/json_io.h"
#include "runtime/core/train_config.h"
#include "runtime/data/dataset.h"
#include "runtime/net/link_probe.h"
#include "runtime/net/link_shape.h"
#include "runtime/net/transport.h"
#include "runtime/train/straggler.h"

namespace dpg::app {

struct EmulationFlags {
  std::string network;                // a network file (link_shape.h)
  std::vector<std::string> links;     // --link, applied in order over the file
  std::vector<std::string> slowdown;  // --slowdown
};

// --network and --link; with `slowdown`, --slowdown too.
void add_network_flags(CLI::App& cmd, EmulationFlags& f, bool slowdown);

// The flags that hand `f`'s network on to a peer process: --network (as an absolute path) and
// each --link.
std::vector<std::string> network_args(const EmulationFlags& f);

// The network of a run of `world` peers: the file, then the flags; errors name the file or the
// flag, and a rank at or above `world`.
net::NetworkShape network_of(const EmulationFlags& f, int world);
std::vector<train::Slowdown> slowdowns_of(const EmulationFlags& f, int world);

// A shaped transport over `inner` when some link of `network` is shaped, else null. `inner`
// must have its progress thread (the caller sets LinkOptions::progress_thread when any()).
std::unique_ptr<net::Transport> shape_links(net::Transport& inner,
                                            const net::NetworkShape& network);

// The links a run probes: 0-1 when the default link is shaped, and every pair the network names,
// where both ends are connected (connected(a, b): whether rank a's transport reaches b).
std::vector<std::pair<int, int>> links_to_probe(
    const net::NetworkShape& network, int world,
    const std::function<bool(int, int)>& connected);

// Collective: each pair's ends probe it over `t` (in the list's order, which cannot deadlock;
// the bulk of each about `bulk_seconds` at its asked bandwidth), and every peer gets every
// pair's figures, as its lower rank measured them.
std::vector<net::ProbeResult> probe_pairs(collective::Communicator& comm, net::Transport& t,
                                          const net::NetworkShape& network,
                                          const std::vector<std::pair<int, int>>& pairs,
                                          double bulk_seconds, net::ProbeOptions o = {});

// probe_pairs, then rank 0 logs one line per pair: what was asked, what it delivered. Returns
// the lines (every rank).
std::vector<std::string> probe_links(collective::Communicator& comm, net::Transport& shaped,
                                     const net::NetworkShape& network,
                                     const std::vector<std::pair<int, int>>& pairs,
                                     double bulk_seconds);

// Collective: each slowed peer times the balancer's public work (train::SpeedProbe: the run's
// DP gradient on a synthetic batch of rows shaped like `shape`'s) plainly and stretched by its
// largest factor (straggler.h), the figures are all-reduced, and rank 0 logs "rank R: asked Fx,
// delivered Dx". Returns the lines.
std::vector<std::string> probe_slowdowns(collective::Communicator& comm, const TrainConfig& c,
                                         const data::Dataset& shape,
                                         const std::vector<train::Slowdown>& slowdown);

// --balance speed, collectively at the start of a run: each peer's speed on public work (its
// slowdown from the start included), the shares of the batch in proportion, and from a folder
// prepared whole the rows re-sharded in proportion (`data` replaced by this peer's new rows), so
// every peer keeps the global sampling rate; else the shares alone set each peer's rate. Rank 0
// logs the speeds and shares.
struct Balanced {
  std::vector<double> speeds;      // examples/s on the calibration batch, by rank
  std::vector<double> shares;      // of the batch: what the privacy plan gets
  std::vector<std::size_t> rows;   // each peer's training rows after the balance
  bool moved = false;              // re-sharded (true) or rates changed (false)
  // Rates changed under --balance-every: the highest rate a peer may be given (the plan's
  // rate_cap); 0 otherwise.
  double rate_cap = 0;
  // Each re-balance of --balance-every: epoch, speeds, and the rows (moved) or shares and rates.
  Json later = Json::array();
  Json to_json() const;
};
Balanced balance_peers(collective::Communicator& comm, const TrainConfig& c,
                       data::Prepared& data, const std::vector<train::Slowdown>& slowdown);
// --balance-every, collectively at the start of epoch `epoch` (its first step `step`): the
// speeds again (each peer slowed by its factor at that step), the rows re-sharded, this peer's
// new training rows returned and `b` updated. The rate stays the global one. `shape` gives the
// rows' inputs and classes (for the calibration's model).
data::Dataset rebalance_rows(collective::Communicator& comm, const TrainConfig& c,
                             const std::vector<train::Slowdown>& slowdown, int epoch,
                             long long step, const data::Dataset& shape, Balanced& b);
// The same over rows that stay with their peers: the speeds again, the shares capped at
// b.rate_cap (train::cap_shares), and every peer's new sampling rate returned, in rank order.
std::vector<double> rerate_peers(collective::Communicator& comm, const TrainConfig& c,
                                 const std::vector<train::Slowdown>& slowdown, int epoch,
                                 long long step, const data::Dataset& shape, Balanced& b);

}  // namespace dpg::app
