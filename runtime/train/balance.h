// The load balancer of --balance speed: each peer's speed, measured on public work (the run's
// model on a synthetic batch of a fixed size, as slowed by --slowdown), and the shares of the
// batch and of the training rows that make every peer's step take about as long. A step's own
// time is never used: it depends on its realised Poisson batch, which is private. The speeds and
// shares are public, every rate is set before the first step, and the privacy plan composes each
// peer's actual rate (dp/privacy_plan.h, PlanInputs::peer_share). docs/HETEROGENEITY.md.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "runtime/collective/communicator.h"
#include "runtime/core/train_config.h"
#include "runtime/model/mlp.h"
#include "runtime/train/straggler.h"

namespace dpg::train {

// One peer's public calibration work: the run's DP gradient on `rows` synthetic examples of
// `spec`, each pass stretched as the straggler stretches a step (its factor at step 0).
class SpeedProbe {
 public:
  SpeedProbe(const TrainConfig& c, const model::MlpSpec& spec, std::size_t rows,
             const Straggler* straggler);
  ~SpeedProbe();
  // One pass; returns its wall seconds.
  double pass();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Collective: every peer's speed (all-reduced), in rank order. Measure them one peer at a time
// where peers share cores (apps/emulation.cc does).
std::vector<double> all_speeds(collective::Communicator& comm, double mine);

// Shares proportional to `speeds`, each at least `floor` of an even share (a peer measured as
// nearly stopped keeps some work), summing to 1.
std::vector<double> shares_of(const std::vector<double>& speeds, double floor = 0.05);

// `shares` moved so that no peer's sampling rate, batch x share_j / rows[j], passes `cap` (the
// rate the privacy plan was calibrated for): what a capped peer cannot take goes to the others in
// proportion to their shares, as long as some peer is under the cap. Throws invalid_argument when
// the cap cannot hold the batch (cap x the rows < batch). Shares within the cap come back as they
// were.
std::vector<double> cap_shares(std::vector<double> shares, const std::vector<double>& rows,
                               double batch, double cap);

// `total` rows split by `shares` (largest remainders; each peer at least one row).
std::vector<std::size_t> row_counts(std::size_t total, const std::vector<double>& shares);

}  // namespace dpg::train
