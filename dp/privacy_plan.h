// The privacy plan of a training run: who samples at which rate, how much noise each peer adds,
// and what that buys the released model and one peer's messages. Computed once, before the first
// step, from public facts only (shard sizes, batch size, epochs, the algorithm's kind), so every
// peer computes the same plan; the epoch lines, the summary and the saved accountant state are all
// read from it and so cannot disagree.
//
// Pure: no I/O, no threads, no transport. Bad arguments throw dpg::Error(invalid_argument).
#pragma once

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
  // shard, so it samples at its own rate; sigma is calibrated for the highest rate, and each
  // peer's epsilon comes from its own.
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
  double epochs = 1;
  double noise_multiplier = 0;       // given sigma; 0 = calibrate to target_epsilon
  double target_epsilon = 0;
  double delta = 1e-5;
  AccountantKind accountant = AccountantKind::pld;  // calibrates sigma and reports epsilon
};

struct PrivacyPlan {
  bool dp = true;
  Release release = Release::summed;
  std::string noise_mode;            // "distributed" or "local": what was actually done
  std::string target = "model";      // "model" or "messages": whose epsilon sigma is calibrated for
  int peers = 1;
  double q = 0;                      // batch_size / all examples: an epoch is 1 / q steps
  long long steps = 0;               // steps every peer takes
  std::vector<double> peer_q;        // each peer's sampling rate
  std::vector<double> peer_batch;    // each peer's mechanism denominator (public expected batch)
  double sigma = 0;                  // the calibrated (or given) multiplier the mode is named for
  double peer_sigma = 0;             // what each peer adds to its own clipped sum
  double model_sigma = 0;            // protecting one peer's data in the released model
  double message_sigma = 0;          // protecting it in that peer's messages
  int worst_peer = 0;                // the peer whose data is least protected (highest rate)
  double delta = 0;
  AccountantKind accountant = AccountantKind::pld;  // what every epsilon below is computed by

  // Epsilon of the worst peer's data after `t` steps, for the model and for its messages
  // (+inf without DP, 0 before the first step), by the plan's accountant.
  PrivacySpent model_after(long long t) const;
  PrivacySpent messages_after(long long t) const;
  // Each peer's epsilon for its data in the model after `t` steps.
  std::vector<double> peer_epsilons_after(long long t) const;
  // The account every peer steps once per step for the model: the worst peer's rate and the
  // model's multiplier, of the plan's kind; its spent() equals model_after(steps()).
  double accountant_q() const { return peer_q[static_cast<std::size_t>(worst_peer)]; }
};

PrivacyPlan plan_privacy(const PlanInputs& in);

}  // namespace dpg::dp
