#include "dp/accountant.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "dp/checks.h"
#include "runtime/core/json_io.h"

namespace dpg::dp {
namespace {

using checks::bad_argument;
using checks::check_delta;
using checks::check_q;
using checks::check_sigma;
using checks::check_steps;
using checks::str;

constexpr const char* kMechanism = "poisson_gaussian";
constexpr const char* kSkellamMechanism = "poisson_skellam";
// What earlier builds wrote: the same history, always evaluated by RDP.
constexpr const char* kLegacyMechanism = "poisson_gaussian_rdp";

PrivacySpent evaluate(std::span<const PoissonGaussian> history, double delta,
                      AccountantKind kind) {
  if (kind == AccountantKind::rdp) return rdp_epsilon(history, delta);
  return {pld_epsilon(history, delta, PldEstimate::pessimistic).value,
          std::numeric_limits<double>::quiet_NaN()};
}

double eval_sigma(double q, long long steps, double delta, double sigma, AccountantKind kind) {
  return epsilon_for(q, sigma, steps, delta, kind).epsilon;
}

}  // namespace

std::string to_string(AccountantKind kind) { return kind == AccountantKind::pld ? "pld" : "rdp"; }

AccountantKind parse_accountant_kind(std::string_view text) {
  if (text == "pld") return AccountantKind::pld;
  if (text == "rdp") return AccountantKind::rdp;
  bad_argument("expected pld or rdp, got \"" + std::string(text.substr(0, 64)) + "\"");
}

PrivacySpent epsilon_for(double q, double sigma, long long steps, double delta,
                         AccountantKind kind) {
  check_q(q, "q");
  check_sigma(sigma, "sigma");
  check_steps(steps, "steps");
  check_delta(delta, "delta");
  const PoissonGaussian segment{q, sigma, steps};
  return evaluate({&segment, 1}, delta, kind);
}

double calibrate_noise_multiplier(double q, long long steps, double delta, double target_epsilon,
                                  AccountantKind kind) {
  if (!(q > 0.0 && q <= 1.0))
    bad_argument("q (sample rate) must be in (0, 1], got " + str(q));
  if (steps < 1) bad_argument("steps must be >= 1, got " + std::to_string(steps));
  check_delta(delta, "delta");
  if (!(target_epsilon > 0.0 && std::isfinite(target_epsilon)))
    bad_argument("target_epsilon must be finite and > 0, got " + str(target_epsilon));
  if (kind == AccountantKind::rdp) {
    const double floor_eps = rdp_epsilon_floor(delta);
    if (target_epsilon <= floor_eps)
      bad_argument("target_epsilon " + str(target_epsilon) + " is unreachable: at delta " +
                   str(delta) + " the RDP orders up to 63 certify no epsilon below " +
                   str(floor_eps) + " whatever the noise");
  }

  constexpr double kMaxSigma = 1e6;
  constexpr double kMinSigma = 1e-3;
  const auto eps = [&](double sigma) { return eval_sigma(q, steps, delta, sigma, kind); };
  // Bracket the root: eps(lo) > target >= eps(hi). Epsilon decreases as sigma grows: from a
  // sigma that meets the target, step down by `shrink`; from one that does not, double.
  double lo = 0.0;
  double hi = 1.0;
  double shrink = 0.5;
  if (kind == AccountantKind::pld && target_epsilon > rdp_epsilon_floor(delta)) {
    // RDP's epsilon lies above PLD's, so RDP's sigma (0.02 s to find) meets the target, and
    // PLD's is typically 5-10% below it: a bracket in two evaluations instead of a dozen.
    try {
      hi = calibrate_noise_multiplier(q, steps, delta, target_epsilon, AccountantKind::rdp);
      shrink = 0.9;
    } catch (const Error&) {
      hi = 1.0;  // RDP finds none in its range: search PLD's own from 1
    }
  }
  if (eps(hi) <= target_epsilon) {
    lo = hi * shrink;
    while (eps(lo) <= target_epsilon) {
      hi = lo;
      lo *= shrink;
      if (lo < kMinSigma)
        bad_argument("target_epsilon " + str(target_epsilon) +
                     " is met by every noise multiplier >= " + str(hi));
    }
  } else {
    do {
      lo = hi;
      hi *= 2;
      if (hi > kMaxSigma)
        bad_argument("target_epsilon " + str(target_epsilon) +
                     " needs a noise multiplier above " + str(kMaxSigma));
    } while (eps(hi) > target_epsilon);
  }
  // 1e-4 rather than 1e-3: three more evaluations keep the result at or below Opacus's, which
  // stops within 0.01 epsilon of the target (about 1e-3 in sigma). Only sigmas whose epsilon
  // was evaluated <= target are ever returned, so the PLD's grid cannot push the result over.
  while (hi - lo > 1e-4 * hi) {
    const double mid = 0.5 * (lo + hi);
    (eps(mid) <= target_epsilon ? hi : lo) = mid;
  }
  return hi;
}

long long steps_for_epochs(double epochs, double q) {
  if (!(epochs > 0.0 && std::isfinite(epochs)))
    bad_argument("epochs must be finite and > 0, got " + str(epochs));
  if (!(q > 0.0 && q <= 1.0))
    bad_argument("q (sample rate) must be in (0, 1], got " + str(q));
  const double r = epochs / q;
  if (r > 1e15) bad_argument("epochs / q = " + str(r) + " steps is too many");
  const double nearest = std::nearbyint(r);
  const double steps = std::fabs(r - nearest) <= 1e-9 * r ? nearest : std::ceil(r);
  return std::max(1LL, static_cast<long long>(steps));
}

// ---- Accountant ----

Accountant Accountant::skellam() {
  Accountant a(AccountantKind::rdp);
  a.skellam_ = true;
  return a;
}

void Accountant::count(long long steps) {
  if (steps > std::numeric_limits<long long>::max() - steps_)
    bad_argument("steps: the total step count would overflow");
  steps_ += steps;
}

void Accountant::step(double q, double sigma, long long steps) {
  if (skellam_) bad_argument("accountant: a Gaussian step on a Skellam (secure aggregation) account");
  check_q(q, "q");
  check_sigma(sigma, "sigma");
  check_steps(steps, "steps");
  if (steps == 0) return;
  count(steps);
  if (!history_.empty() && history_.back().q == q && history_.back().sigma == sigma) {
    history_.back().steps += steps;
  } else {
    history_.push_back({q, sigma, steps});
  }
}

void Accountant::step_skellam(double q, double mu, double l1, double l2, long long steps) {
  if (!skellam_) bad_argument("accountant: a Skellam step on a Gaussian account");
  check_q(q, "q");
  check_steps(steps, "steps");
  if (!(mu > 0.0 && std::isfinite(mu)))
    bad_argument("mu (Skellam Poisson mean) must be finite and > 0, got " + str(mu));
  if (!(l1 >= 0.0 && std::isfinite(l1) && l2 >= 0.0 && std::isfinite(l2)))
    bad_argument("l1 and l2 (sensitivities) must be finite and >= 0, got " + str(l1) + " and " +
                 str(l2));
  const PoissonSkellam segment{q, mu, l1, l2, steps};
  if (steps == 0) return;
  count(steps);
  PoissonSkellam* last = skellam_history_.empty() ? nullptr : &skellam_history_.back();
  if (last && last->q == q && last->mu == mu && last->l1 == l1 && last->l2 == l2) {
    last->steps += steps;
  } else {
    skellam_history_.push_back(segment);
  }
}

PrivacySpent Accountant::spent(double delta, AccountantKind kind) const {
  check_delta(delta, "delta");
  if (skellam_) return skellam_epsilon(skellam_history_, delta);
  return evaluate(history_, delta, kind);
}

nlohmann::json Accountant::to_json() const {
  nlohmann::json history = nlohmann::json::array();
  for (const Segment& s : history_)
    history.push_back({{"q", s.q}, {"sigma", s.sigma}, {"steps", s.steps}});
  for (const PoissonSkellam& s : skellam_history_) {
    history.push_back(
        {{"q", s.q}, {"mu", s.mu}, {"l1", s.l1}, {"l2", s.l2}, {"steps", s.steps}});
  }
  return {{"mechanism", skellam_ ? kSkellamMechanism : kMechanism},
          {"accountant", to_string(kind_)},
          {"history", std::move(history)}};
}

Accountant Accountant::from_json(const nlohmann::json& j, const std::string& where) {
  const JsonReader root(j, where);
  const std::string mechanism = root.string("mechanism");
  AccountantKind kind = AccountantKind::rdp;
  const bool skellam = mechanism == kSkellamMechanism;
  if (mechanism == kMechanism || skellam) {
    root.reject_unknown({"mechanism", "accountant", "history"});
    const std::string text = root.string("accountant");
    try {
      kind = parse_accountant_kind(text);
    } catch (const Error& e) {
      root.fail_at("accountant", e.what());
    }
    if (skellam && kind != AccountantKind::rdp)
      root.fail_at("accountant", "a poisson_skellam account is evaluated by rdp, got \"" + text + "\"");
  } else if (mechanism == kLegacyMechanism) {
    root.reject_unknown({"mechanism", "history"});
  } else {
    root.fail_at("mechanism", std::string("expected \"") + kMechanism + "\", \"" +
                                  kSkellamMechanism + "\" (or \"" + kLegacyMechanism +
                                  "\"), got \"" + mechanism + "\"");
  }
  const nlohmann::json& history = root.at("history");
  if (!history.is_array()) root.fail_at("history", "expected an array, got " + quote(history));

  Accountant acc = skellam ? Accountant::skellam() : Accountant(kind);
  for (size_t k = 0; k < history.size(); ++k) {
    const JsonReader e(history[k], root.path("history") + "/" + std::to_string(k));
    if (skellam) {
      e.reject_unknown({"q", "mu", "l1", "l2", "steps"});
    } else {
      e.reject_unknown({"q", "sigma", "steps"});
    }
    const double q = e.number("q");
    if (!(q >= 0.0 && q <= 1.0)) e.fail_at("q", "expected a sample rate in [0, 1], got " + str(q));
    const long long steps = e.integer("steps");
    if (steps < 1) e.fail_at("steps", "expected an integer >= 1, got " + std::to_string(steps));
    if (steps > std::numeric_limits<long long>::max() - acc.steps_)
      e.fail_at("steps", "the total step count would overflow");
    if (skellam) {
      const double mu = e.number("mu");
      if (!(mu > 0.0 && std::isfinite(mu)))
        e.fail_at("mu", "expected a Skellam Poisson mean > 0, got " + str(mu));
      double l[2];
      const char* names[2] = {"l1", "l2"};
      for (int i = 0; i < 2; ++i) {
        l[i] = e.number(names[i]);
        if (!(l[i] >= 0.0 && std::isfinite(l[i])))
          e.fail_at(names[i], std::string("expected a sensitivity >= 0, got ") + str(l[i]));
      }
      acc.step_skellam(q, mu, l[0], l[1], steps);
      continue;
    }
    const double sigma = e.number("sigma");
    if (!(sigma > 0.0 && std::isfinite(sigma)))
      e.fail_at("sigma", "expected a noise multiplier > 0, got " + str(sigma));
    acc.step(q, sigma, steps);
  }
  return acc;
}

}  // namespace dpg::dp
