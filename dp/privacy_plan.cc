#include "dp/privacy_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "dp/discrete_gaussian.h"
#include "dp/skellam.h"
#include "runtime/core/error.h"

namespace dpg::dp {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) fail(Code::invalid_argument, "privacy plan: " + what);
}

PrivacySpent no_dp() {
  return {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()};
}

// ln P(X >= x) for X ~ Poisson(lambda), x > lambda (Chernoff): -lambda + x ln(e lambda / x).
double log_poisson_upper_tail(double lambda, double x) {
  return -lambda + x * (1.0 + std::log(lambda / x));
}

// The grid, sensitivities and Skellam noise of secure aggregation (privacy_plan.h). sigma0 is
// the Gaussian multiplier the same target needs, a guide for the room the noise takes.
SecureAggregationPlan plan_secure_aggregation(const PlanInputs& in, const PrivacyPlan& p,
                                              double sigma0) {
  require(p.peers >= 2, "secure_aggregation needs at least 2 peers");
  require(in.num_params >= 1, "secure_aggregation needs the model's size");
  require(in.widest_layer >= 1, "secure_aggregation needs the model's widest layer");
  const double d = in.num_params;
  const double eta = float_allowance(in.widest_layer);
  const double limit = 2147483647.0;  // int32's largest value: the sum is read back as int32
  const double batch = in.batch_size;
  SecureAggregationPlan g;
  g.batch_bound = std::ceil(batch + 12.0 * std::sqrt(batch) + 40.0);
  const double n = static_cast<double>(p.peers);
  // The share of the noise that protects against the other peers (target messages) or all.
  const double protecting = in.target_messages ? (n - 1.0) / n : 1.0;
  double scale = kMaxGridScale;
  // The most grid steps one example puts in one coordinate.
  const auto entry = [eta](double s) { return s * (1.0 + eta) + 0.5; };
  // Start where the Gaussian's noise (1.2 x for the Skellam's looser bound) leaves 12 standard
  // deviations of room, then halve while the calibrated Skellam noise does not.
  while (scale > 1 &&
         entry(scale) * g.batch_bound + 14.4 * scale * sigma0 / std::sqrt(protecting) > limit) {
    scale /= 2;
  }
  for (;; scale /= 2) {
    require(scale >= 1, "secure_aggregation: no grid scale fits the int32 range (batch_size " +
                            std::to_string(batch) + ")");
    g.grid_scale = scale;
    g.l2 = scale * (1.0 + eta) + 0.5 * std::sqrt(d);
    g.l1 = std::sqrt(d) * scale * (1.0 + eta) + 0.5 * d;
    if (in.noise_multiplier > 0) {
      // Given sigma: the same standard deviation, sigma * l2, as Skellam's sqrt(2 mu).
      g.mu = 0.5 * std::pow(in.noise_multiplier * g.l2, 2);
    } else {
      try {
        g.mu = calibrate_skellam_mu(p.q, p.steps, in.delta, in.target_epsilon, g.l1, g.l2) /
               protecting;
      } catch (const Error&) {
        // The noise may need a larger mu than the sampler takes (kMaxSkellamMu) at this scale;
        // a coarser grid needs a quarter of it per halving. Below 2^8 the rounding would
        // dominate the sensitivity: the target is out of reach.
        if (scale > 256) continue;
        throw;
      }
    }
    const double margin = limit - entry(scale) * g.batch_bound;
    if (margin >= 12.0 * std::sqrt(2.0 * g.mu)) {
      // Bernstein: P(|Sk(mu)| >= t) <= 2 exp(-t^2 / (2 (2 mu + t / 3))); Chernoff for the batch.
      const double log_noise = std::log(2.0) - margin * margin / (2.0 * (2.0 * g.mu + margin / 3.0));
      const double steps = static_cast<double>(p.steps);
      g.overflow_bound = std::min(1.0, steps * d * std::exp(log_noise) +
                                           steps * std::exp(log_poisson_upper_tail(batch, g.batch_bound)));
      break;
    }
  }
  g.peer_mu = g.mu / n;
  return g;
}

}  // namespace

PrivacyPlan plan_privacy(const PlanInputs& in) {
  require(!in.shard_rows.empty(), "no peers");
  require(in.batch_size >= 1, "batch_size must be at least 1");
  require(in.epochs > 0, "epochs must be positive");
  double total = 0;
  for (std::size_t j = 0; j < in.shard_rows.size(); ++j) {
    require(in.shard_rows[j] >= 1, "peer " + std::to_string(j) + "'s training shard is empty");
    total += in.shard_rows[j];
  }
  require(in.batch_size <= total, "batch_size " + std::to_string(in.batch_size) +
                                      " exceeds the " + std::to_string(total) +
                                      " training examples");
  PrivacyPlan p;
  p.dp = in.dp;
  p.release = in.release;
  p.peers = static_cast<int>(in.shard_rows.size());
  p.shard_rows = in.shard_rows;
  p.delta = in.delta;
  p.accountant = in.accountant;
  p.q = in.batch_size / total;
  p.steps = steps_for_epochs(in.epochs, p.q);
  const double n = static_cast<double>(p.peers);
  if (!in.peer_share.empty()) {
    require(in.peer_share.size() == in.shard_rows.size(),
            "peer_share needs one share per peer (" + std::to_string(in.shard_rows.size()) + ")");
    double sum = 0;
    for (double s : in.peer_share) {
      require(std::isfinite(s) && s > 0, "every peer's share must be positive");
      sum += s;
    }
    require(std::abs(sum - 1) < 1e-9, "the peers' shares must sum to 1");
    for (std::size_t j = 0; j < in.shard_rows.size(); ++j) {
      const double batch = in.batch_size * in.peer_share[j];
      require(batch <= in.shard_rows[j],
              "batch_size: peer " + std::to_string(j) + "'s share, " + std::to_string(batch) +
                  ", exceeds its " + std::to_string(in.shard_rows[j]) + " examples");
      p.peer_q.push_back(batch / in.shard_rows[j]);
      // Summed: every peer divides by the global batch. Own: by an even share of it, whatever
      // its own share, so that every example weighs the same in the updates and every peer's
      // update carries the same noise (a peer with a small share makes a small step).
      p.peer_batch.push_back(in.release == Release::summed ? in.batch_size : in.batch_size / n);
    }
    // Shares proportional to the shards (rows a balancer moved) give every peer the global rate
    // up to the rounding of batch x share / rows: those rates are made one, the highest of them
    // and the global one, so that the peers report one rate and none is accounted lower.
    const auto [lo, hi] = std::minmax_element(p.peer_q.begin(), p.peer_q.end());
    if (std::abs(*lo - p.q) <= 1e-12 * p.q && std::abs(*hi - p.q) <= 1e-12 * p.q) {
      p.peer_q.assign(p.peer_q.size(), std::max(*hi, p.q));
    }
  } else if (in.release == Release::summed) {
    p.peer_q.assign(in.shard_rows.size(), p.q);
    p.peer_batch.assign(in.shard_rows.size(), in.batch_size);
  } else {
    const double local_batch = in.batch_size / n;
    for (std::size_t j = 0; j < in.shard_rows.size(); ++j) {
      require(local_batch <= in.shard_rows[j],
              "batch_size: each peer's share, " + std::to_string(local_batch) + ", exceeds peer " +
                  std::to_string(j) + "'s " + std::to_string(in.shard_rows[j]) + " examples");
      p.peer_q.push_back(local_batch / in.shard_rows[j]);
    }
    p.peer_batch.assign(in.shard_rows.size(), local_batch);
  }
  p.worst_peer = static_cast<int>(std::max_element(p.peer_q.begin(), p.peer_q.end()) -
                                  p.peer_q.begin());
  if (in.rate_cap != 0) {
    require(std::isfinite(in.rate_cap) && in.rate_cap > 0 && in.rate_cap <= 1,
            "rate_cap must be a sampling rate in (0, 1]");
    require(!in.secure_aggregation, "secure aggregation keeps its rates (no rate_cap)");
    require(p.accountant_q() <= in.rate_cap * (1 + 1e-12),
            "peer " + std::to_string(p.worst_peer) + "'s rate " +
                std::to_string(p.accountant_q()) + " passes the rate cap " +
                std::to_string(in.rate_cap));
    p.rate_cap = in.rate_cap;
  }
  const bool local = in.release == Release::own || !in.distributed_noise || in.target_messages;
  p.target = in.target_messages ? "messages" : "model";
  p.noise_mode = local ? "local" : "distributed";
  if (!in.dp) return p;
  require(in.delta > 0 && in.delta < 1, "delta must be in (0, 1)");
  p.sigma = in.noise_multiplier > 0
                ? in.noise_multiplier
                : calibrate_noise_multiplier(p.calibration_q(), p.steps, in.delta,
                                             in.target_epsilon, in.accountant);
  const double root_n = std::sqrt(n);
  if (in.secure_aggregation) {
    require(in.release == Release::summed, "secure_aggregation needs a summed release (allreduce)");
    p.secure_aggregation = true;
    p.noise_mode = "distributed";
    p.secagg = plan_secure_aggregation(in, p, p.sigma);
    // The Gaussian equivalents: the noise's standard deviation in clip norms.
    p.model_sigma = p.sigma = std::sqrt(2.0 * p.secagg.mu) / p.secagg.grid_scale;
    p.peer_sigma = p.model_sigma / root_n;
    p.message_sigma = std::sqrt(2.0 * p.secagg.mu * (n - 1.0) / n) / p.secagg.grid_scale;
    return p;
  }
  if (in.release == Release::own) {
    p.peer_sigma = p.model_sigma = p.message_sigma = p.sigma;
  } else if (local) {
    p.peer_sigma = p.message_sigma = p.sigma;
    p.model_sigma = p.sigma * root_n;
  } else {
    p.peer_sigma = p.message_sigma = p.sigma / root_n;
    p.model_sigma = p.sigma;
  }
  return p;
}

PrivacyPlan plan_with_multiplier_from(const PlanInputs& in, double sigma, const std::string& from) {
  require(in.dp && in.noise_multiplier == 0,
          "a multiplier from " + from + " replaces only a calibration (dp on, noise_multiplier 0)");
  require(!in.secure_aggregation, "secure aggregation calibrates its own noise on its grid");
  require(sigma > 0 && std::isfinite(sigma), from + "'s noise multiplier " + std::to_string(sigma) +
                                                 " is not a positive number");
  PlanInputs given = in;
  given.noise_multiplier = sigma;
  PrivacyPlan p = plan_privacy(given);
  const double eps = epsilon_for(p.calibration_q(), sigma, p.steps, in.delta, in.accountant).epsilon;
  if (!(eps <= in.target_epsilon)) {
    fail(Code::failed_precondition,
         from + "'s noise multiplier " + std::to_string(sigma) + " gives epsilon " +
             std::to_string(eps) + " here, above target_epsilon " +
             std::to_string(in.target_epsilon));
  }
  return p;
}

PrivacySpent PrivacyPlan::model_after(long long t) const {
  if (dp && secure_aggregation) {
    return skellam_epsilon(accountant_q(), secagg.mu, secagg.l1, secagg.l2, t, delta);
  }
  return dp ? epsilon_for(accountant_q(), model_sigma, t, delta, accountant) : no_dp();
}

PrivacySpent PrivacyPlan::messages_after(long long t) const {
  // Under secure aggregation a peer's messages are masked: whoever reads them learns at most the
  // sum, and a peer also its own share of the noise; peers_after() covers both.
  if (secure_aggregation) return peers_after(t);
  return dp ? epsilon_for(accountant_q(), message_sigma, t, delta, accountant) : no_dp();
}

PrivacySpent PrivacyPlan::peers_after(long long t) const {
  if (!dp) return no_dp();
  if (!secure_aggregation) return messages_after(t);
  const double n = static_cast<double>(peers);
  return skellam_epsilon(accountant_q(), secagg.mu * (n - 1.0) / n, secagg.l1, secagg.l2, t,
                         delta);
}

Accountant PrivacyPlan::new_account() const {
  return secure_aggregation ? Accountant::skellam() : Accountant(accountant);
}

void PrivacyPlan::charge(Accountant& model, Accountant& messages, long long steps) const {
  if (!dp) return;
  if (secure_aggregation) {
    const double n = static_cast<double>(peers);
    model.step_skellam(accountant_q(), secagg.mu, secagg.l1, secagg.l2, steps);
    messages.step_skellam(accountant_q(), secagg.mu * (n - 1.0) / n, secagg.l1, secagg.l2, steps);
    return;
  }
  charge_at(accountant_q(), model, messages, steps);
}

void PrivacyPlan::charge_at(double q, Accountant& model, Accountant& messages,
                            long long steps) const {
  if (!dp) return;
  if (secure_aggregation || !(q > 0 && q <= calibration_q() * (1 + 1e-12))) {
    fail(Code::internal, "privacy plan: a charge at rate " + std::to_string(q) +
                             (secure_aggregation ? " under secure aggregation"
                                                 : ", past the rate calibrated for, " +
                                                       std::to_string(calibration_q())));
  }
  model.step(q, model_sigma, steps);
  messages.step(q, message_sigma, steps);
}

std::vector<double> PrivacyPlan::per_rate(long long t, double sigma) const {
  std::vector<double> out;
  for (std::size_t j = 0; j < peer_q.size(); ++j) {
    // Peers at one rate share one figure: the accountant's work (tens of milliseconds with PLD)
    // is done once per distinct rate.
    std::size_t same = 0;
    while (same < j && peer_q[same] != peer_q[j]) ++same;
    if (same < j) {
      out.push_back(out[same]);
      continue;
    }
    out.push_back(dp ? epsilon_for(peer_q[j], sigma, t, delta, accountant).epsilon
                     : no_dp().epsilon);
  }
  return out;
}

std::vector<double> PrivacyPlan::peer_epsilons_after(long long t) const {
  if (dp && secure_aggregation) return std::vector<double>(peer_q.size(), model_after(t).epsilon);
  return per_rate(t, model_sigma);
}

std::vector<double> PrivacyPlan::peer_message_epsilons_after(long long t) const {
  if (dp && secure_aggregation) {
    return std::vector<double>(peer_q.size(), messages_after(t).epsilon);
  }
  return per_rate(t, message_sigma);
}

}  // namespace dpg::dp
