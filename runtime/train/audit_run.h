// A one-run empirical privacy audit of a training run (Steinke, Nasr and Jagielski 2023): m
// canaries, each included with probability 1/2 by the auditor's coin, one real training run that
// treats the included ones as it treats its examples, one score per canary, guesses and the
// epsilon lower bound of dp/audit.h beside the run's own accountant. docs/PRIVACY.md,
// "Empirical audit".
//
// Two kinds of canary, both through the run's own code paths:
// - gradient (white box): a Dirac canary, the gradient C e_c on a coordinate c of its own, is a
//   member of the run's data that the trainer's sum hook adds to the clipped sum: it joins each
//   step by its own Poisson draw at the accountant's rate q (PoissonSampler), is clipped to C
//   (dp::clip_factors; a no-op at norm C) and is noised by the mechanism with the rest of the
//   sum. c is a first-layer weight W_0[h][p] drawn at random with p = 1, 4, 7, ..., so that its
//   neighbours W_0[h][p -+ 1] are never canaries. Score: the sum over the steps of the negative
//   model update along c (initial minus final value), less the mean of the same for the two
//   neighbours: the examples move weights of adjacent inputs alike, and without the control
//   their drift, not the noise, hides the canaries of a run with little noise.
// - input (black box): a random image (pixels uniform over the training split's range) with a
//   random label, appended to the training split, so that it goes through the sampler, the
//   per-example clipping and the noise as any example does. Score: minus its loss under the
//   released model (the last iterate).
// Higher scores are guessed "in".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dp/audit.h"
#include "runtime/core/train_config.h"
#include "runtime/data/dataset.h"
#include "runtime/train/report.h"

namespace dpg::train {

enum class CanaryKind { gradient, input };
std::string to_string(CanaryKind kind);
// "gradient" or "input"; anything else throws invalid_argument naming `--canary`.
CanaryKind parse_canary_kind(const std::string& text);

struct AuditOptions {
  CanaryKind kind = CanaryKind::gradient;
  long long canaries = 1000;  // m
  long long k_plus = 100;     // guessed "in": the highest scores
  long long k_minus = 100;    // guessed "out": the lowest scores
  double confidence = 0.95;
  // The auditor's coins: which canaries (coordinates, images) and which are included. The
  // canaries' batch draws are the run's secret: from the config's noise_seed when it is set,
  // else from the OS.
  std::uint64_t seed = 0;  // dpgossip audit: the config's --seed
};

struct AuditResult {
  long long canaries = 0, included = 0, guesses = 0, correct = 0;
  double epsilon_lower_bound = 0;  // at the config's delta, with options.confidence
  double mean_score_in = 0, mean_score_out = 0;
  TrainSummary summary;            // the run's own: its epsilon is the accountant's
  double sample_rate = 0, noise_multiplier = 0;
  long long steps = 0;
};

// Checks the options against the config (single peer, Poisson sampling, canaries within the
// parameters for gradient canaries, k+ + k- <= m); errors name the flag.
void check_audit(const TrainConfig& c, const AuditOptions& o);

// Runs the audit: `data` is the run's data without canaries (one peer's, whole). Trains once.
AuditResult run_audit(const TrainConfig& c, data::Prepared data, const AuditOptions& o);

}  // namespace dpg::train
