// The privacy plan of a training run: who samples at which rate, how much noise each peer adds,
// and what that buys the released model and one peer's messages. Computed once, before the first
// step, from public facts only (shard sizes, batch size, epochs, the algorithm's kind), so every
// peer computes the same plan; the epoch lines, the summary and the saved accountant state are all
// read from it and so cannot disagree.
//
// Pure: no I/O, no threads, no transport. Bad arguments throw dpg::Error(invalid_argument).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "dp/accountant.h"

namespace dpg::dp {

// How one peer's noised gradient reaches the model, which decides what its noise protects.
enum class Release {
  // Every step the peers' noised gradients are summed before anyone uses them (all-reduce,
  // synchronous parameter server). Each peer samples its shard at the global rate q and divides by
  // the global batch size. Noise adds up in the sum: in `distributed` mode each of N peers adds
  // sigma / sqrt(N), so the sum carries sigma (the model's guarantee) while each message carries
  // only sigma / sqrt(N); in `local` mode each adds sigma, so each message carries sigma and the
  // sum sigma * sqrt(N).
  summed,
  // Each peer's own noised gradient updates a model that others then see (gossip, local SGD,
  // asynchronous parameter server, AD-PSGD): nothing sums noise before it leaves, so every peer
  // adds the full sigma (local noise). Each takes batch_size / N expected examples of its own
  // shard (or its balanced share of batch_size: PlanInputs::peer_share), so it samples at its
  // own rate; sigma is calibrated for the highest rate, and each peer's epsilon comes from its
  // own.
  own,
};

struct PlanInputs {
  bool dp = true;
  Release release = Release::summed;
  bool distributed_noise = true;     // summed only: false = local noise
  // The party target_epsilon is for: false, the released model; true, every peer's messages.
  // Summed release then needs local noise (each message carries the calibrated sigma), whatever
  // distributed_noise says; with own release both parties already share one sigma.
  bool target_messages = false;
  std::vector<double> shard_rows;    // every peer's training examples, in rank order
  double batch_size = 1;             // expected examples per step over all peers
  // Each peer's share of batch_size (a load balancer's, from public speeds; they sum to 1), so
  // that peer j samples at batch_size * share_j / shard_rows[j]. Its mechanism still divides by
  // the global batch (summed) or by an even share, batch_size / N (own), so that every example
  // weighs the same and every update carries the same noise. Empty: the default, the global
  // rate for every peer under a summed release and batch_size / N each under an own release.
  // Shares proportional to the shards give every peer the global rate under either release.
  std::vector<double> peer_share;
  // The highest rate a peer may be given during the run (0: the rates above hold throughout): a
  // balancer that changes the rates at epoch starts, over shards that stay with their peers.
  // Sigma is calibrated for it, so a run whose every rate stays at or below it, charged at its
  // highest rate of each step (PrivacyPlan::charge), never passes the target.
  double rate_cap = 0;
  double epochs = 1;
  double noise_multiplier = 0;       // given sigma; 0 = calibrate to target_epsilon
  double target_epsilon = 0;
  double delta = 1e-5;
  AccountantKind accountant = AccountantKind::pld;  // calibrates sigma and reports epsilon
  // Secure aggregation (summed release only): integer Skellam noise on a fixed-point grid, summed
  // under pairwise masks modulo 2^32. Needs the model's size for the rounding's share of the
  // sensitivity, and at least 2 peers.
  bool secure_aggregation = false;
  double num_params = 0;
  int widest_layer = 0;  // the model's widest layer: the clipping's float allowance (eta)
};

// The fixed-point grid and Skellam noise of secure aggregation (dp/skellam.h, dp/secagg.h).
//
// Each example's clipped gradient (L2 norm at most C (1 + eta), eta the float allowance of the
// clipping, dp/discrete_gaussian.h) goes onto the grid entry by entry as round(x * grid_scale /
// C), and a peer sums the integers exactly (model::Mlp's *_on_grid, as secure noise does): one
// clip norm is grid_scale steps. Adding or removing one example moves a peer's grid sum by
// exactly that example's integer vector, whatever the others, so by at most
//   l2 = grid_scale (1 + eta) + sqrt(d) / 2            in L2 norm, and
//   l1 = sqrt(d) * grid_scale (1 + eta) + d / 2        in L1 norm (||v||_1 <= sqrt(d) ||v||_2).
// The grid scale is the largest power of two (at most kMaxGridScale, 2^16) for which the sum of
// every peer's grid values stays inside the int32 range: per coordinate |sum| <= (grid_scale
// (1 + eta) + 1/2) B + |noise|, with B the global Poisson batch; the margin left for the noise
// must be at least 12 of its standard deviations. overflow_bound bounds the probability that any coordinate of any step's
// sum wraps: Chernoff's bound on the Poisson batch passing the bound used, and Bernstein's on the
// Skellam noise passing the margin, over every coordinate and step (a wrap spoils that step's
// update; it does not weaken privacy, which the noise on the grid gives whatever the sum is).
struct SecureAggregationPlan {
  double grid_scale = 0;      // grid steps per clip norm C
  double batch_bound = 0;     // the global batch the range is sized for
  double l1 = 0, l2 = 0;      // sensitivities on the grid, as above
  double mu = 0;              // the sum's Skellam parameter (variance 2 mu, grid steps squared)
  double peer_mu = 0;         // each peer's share: mu / peers
  double overflow_bound = 0;  // P(some coordinate of some step's sum leaves the int32 range)
};

struct PrivacyPlan {
  bool dp = true;
  Release release = Release::summed;
  std::string noise_mode;            // "distributed" or "local": what was actually done
  std::string target = "model";      // "model" or "messages": whose epsilon sigma is calibrated for
  int peers = 1;
  double q = 0;                      // batch_size / all examples: an epoch is 1 / q steps
  long long steps = 0;               // steps every peer takes
  std::vector<double> peer_q;        // each peer's sampling rate (at the start, with a rate_cap)
  std::vector<double> shard_rows;    // every peer's training examples, in rank order
  double rate_cap = 0;               // PlanInputs::rate_cap (0: none)
  std::vector<double> peer_batch;    // each peer's mechanism denominator (public expected batch)
  double sigma = 0;                  // the calibrated (or given) multiplier the mode is named for
  double peer_sigma = 0;             // what each peer adds to its own clipped sum
  double model_sigma = 0;            // protecting one peer's data in the released model
  double message_sigma = 0;          // protecting it in that peer's messages
  int worst_peer = 0;                // the peer whose data is least protected (highest rate)
  double delta = 0;
  AccountantKind accountant = AccountantKind::pld;  // what every epsilon below is computed by
  // Secure aggregation: the grid and noise, and then every epsilon is the Skellam mechanism's by
  // Renyi DP (dp/skellam.h), whatever `accountant` says; sigma, model_sigma and peer_sigma are
  // its Gaussian equivalents (the noise's standard deviation over grid_scale).
  bool secure_aggregation = false;
  SecureAggregationPlan secagg;

  // Epsilon of the worst peer's data after `t` steps, for the model and for its messages
  // (+inf without DP, 0 before the first step), by the plan's accountant.
  PrivacySpent model_after(long long t) const;
  PrivacySpent messages_after(long long t) const;
  // Secure aggregation: the model's epsilon against one of the other peers, who knows its own
  // share of the noise, so only the other peers' shares protect (mu (N - 1) / N). Without it the
  // peers see the messages: messages_after(t).
  PrivacySpent peers_after(long long t) const;
  // Each peer's epsilon for its data in the model after `t` steps.
  std::vector<double> peer_epsilons_after(long long t) const;
  // Each peer's epsilon for its data in its own messages after `t` steps, in rank order (at its
  // own rate, with the messages' noise).
  std::vector<double> peer_message_epsilons_after(long long t) const;
  // The account every peer steps once per step for the model: the worst peer's rate and the
  // model's multiplier, of the plan's kind; its spent() equals model_after(steps()).
  double accountant_q() const { return peer_q[static_cast<std::size_t>(worst_peer)]; }
  // The rate sigma is calibrated for: the rate cap where there is one, else accountant_q().
  double calibration_q() const { return std::max(rate_cap, accountant_q()); }
  // A new, empty account of the plan's mechanism: the Gaussian of the plan's kind, or under secure
  // aggregation the Skellam (so that a saved account re-evaluates to what the run reported).
  Accountant new_account() const;
  // Charges `steps` steps to the model's account and the messages' (under secure aggregation: the
  // model against one other peer, as peers_after). Afterwards model.spent(delta) equals
  // model_after(model.steps()) and messages.spent(delta) messages_after(messages.steps()).
  void charge(Accountant& model, Accountant& messages, long long steps = 1) const;
  // The same at rate q, the highest any peer has in these steps (a balancer changed the rates;
  // at most calibration_q(), else internal): an account at the highest rate bounds every
  // peer's, since the subsampled mechanism's privacy loss grows with the rate.
  void charge_at(double q, Accountant& model, Accountant& messages, long long steps = 1) const;

 private:
  // At each peer's rate with multiplier `sigma` after `t` steps: one accountant's figure per
  // distinct rate.
  std::vector<double> per_rate(long long t, double sigma) const;
};

PrivacyPlan plan_privacy(const PlanInputs& in);

// The plan for `in` (which asks for calibration: noise_multiplier 0) with the multiplier `sigma`
// that another party's calibration found, checked here as calibration guarantees its result: the
// epsilon at the plan's accounting rate and steps, by in's accountant, is at most
// in.target_epsilon. One evaluation instead of a search, and no trust in the other party: a sigma
// that misses the target throws failed_precondition naming `from`. Not for secure aggregation,
// whose noise is calibrated on its grid (invalid_argument).
PrivacyPlan plan_with_multiplier_from(const PlanInputs& in, double sigma, const std::string& from);

}  // namespace dpg::dp
