#include "dp/privacy_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/core/error.h"

namespace dpg::dp {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) fail(Code::invalid_argument, "privacy plan: " + what);
}

PrivacySpent no_dp() {
  return {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()};
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
  p.delta = in.delta;
  p.accountant = in.accountant;
  p.q = in.batch_size / total;
  p.steps = steps_for_epochs(in.epochs, p.q);
  const double n = static_cast<double>(p.peers);
  if (in.release == Release::summed) {
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
  const bool local = in.release == Release::own || !in.distributed_noise || in.target_messages;
  p.target = in.target_messages ? "messages" : "model";
  p.noise_mode = local ? "local" : "distributed";
  if (!in.dp) return p;
  require(in.delta > 0 && in.delta < 1, "delta must be in (0, 1)");
  p.sigma = in.noise_multiplier > 0
                ? in.noise_multiplier
                : calibrate_noise_multiplier(p.accountant_q(), p.steps, in.delta,
                                             in.target_epsilon, in.accountant);
  const double root_n = std::sqrt(n);
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

PrivacySpent PrivacyPlan::model_after(long long t) const {
  return dp ? epsilon_for(accountant_q(), model_sigma, t, delta, accountant) : no_dp();
}

PrivacySpent PrivacyPlan::messages_after(long long t) const {
  return dp ? epsilon_for(accountant_q(), message_sigma, t, delta, accountant) : no_dp();
}

std::vector<double> PrivacyPlan::peer_epsilons_after(long long t) const {
  std::vector<double> out;
  for (double qj : peer_q) {
    out.push_back(dp ? epsilon_for(qj, model_sigma, t, delta, accountant).epsilon
                     : no_dp().epsilon);
  }
  return out;
}

}  // namespace dpg::dp
