// The RDP accountant (and the Accountant's history and JSON) against Opacus's published
// figures and against an independent reference:
// the Renyi divergence of the subsampled Gaussian computed by numerical quadrature of its
// definition (long double), with the (epsilon, delta) conversion re-derived here.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "dp/accountant.h"
#include "runtime/core/error.h"
#include "tests/unit/dp/errors.h"

namespace dp = dpg::dp;
using ld = long double;
constexpr dp::AccountantKind kRdp = dp::AccountantKind::rdp;

namespace {

// log A_alpha for the Poisson-subsampled Gaussian (Mironov et al. 2019, add/remove adjacency):
//   A = E_{z ~ N(0, s^2)} [ (1 + q (e^t - 1))^alpha ],  t = (2z - 1) / (2 s^2).
// Because E[e^t - 1] = 0, A - 1 = E[f(z)] with f = (1 + x)^alpha - 1 - alpha x >= 0 and
// x = q (e^t - 1): an integrand without cancellation, summed in log space with the trapezoid rule
// (spectrally accurate for this analytic, Gaussian-tailed integrand) on a grid of s/20 that spans
// 30 s beyond the mass, which sits between z = 0 and z = alpha.
class QuadratureReference {
 public:
  QuadratureReference(ld q, ld s, ld max_alpha) {
    const ld h = s / 20;
    const ld lo = -30 * s;
    const ld hi = std::max<ld>(max_alpha, 1) + 30 * s;
    const long n = std::lround(std::ceil((hi - lo) / h));
    const ld log_norm = std::log(h) - std::log(s) - 0.5L * std::log(2 * std::acos(-1.0L));
    for (long i = 0; i <= n; ++i) {
      const ld z = lo + h * i;
      const ld t = (2 * z - 1) / (2 * s * s);
      const ld x = q * std::expm1(t);
      // log(1 + x) without overflow for large t: t + log(q + (1 - q) e^-t).
      const ld log1px = t > 0 ? t + std::log(q + (1 - q) * std::exp(-t)) : std::log1p(x);
      const ld w = (i == 0 || i == n) ? std::log(0.5L) : 0.0L;
      points_.push_back({x, log1px, -z * z / (2 * s * s) + log_norm + w});
    }
  }

  ld log_a(ld alpha) const {
    std::vector<ld> terms;
    terms.reserve(points_.size());
    ld top = -std::numeric_limits<ld>::infinity();
    for (const Point& p : points_) {
      const ld big_s = alpha * p.log1px;  // log (1 + x)^alpha
      ld log_f;
      if (big_s > 40) {
        log_f = big_s + std::log1p(-(1 + alpha * p.x) * std::exp(-big_s));
      } else {
        const ld f = std::expm1(big_s) - alpha * p.x;
        if (!(f > 0)) continue;  // exactly 0 where x underflows; rounding noise elsewhere
        log_f = std::log(f);
      }
      terms.push_back(log_f + p.log_phi_w);
      top = std::max(top, terms.back());
    }
    ld sum = 0;
    for (ld v : terms) sum += std::exp(v - top);
    const ld log_a_minus_1 = top + std::log(sum);
    return log_a_minus_1 > 40 ? log_a_minus_1 + std::log1p(std::exp(-log_a_minus_1))
                              : std::log1p(std::exp(log_a_minus_1));
  }

  ld rdp(ld alpha) const { return log_a(alpha) / (alpha - 1); }

 private:
  struct Point {
    ld x;
    ld log1px;
    ld log_phi_w;  // log of the N(0, s^2) density times the trapezoid weight
  };
  std::vector<Point> points_;
};

std::vector<ld> reference_rdp(ld q, ld s, const std::vector<double>& orders) {
  std::vector<ld> rdp;
  if (q == 1) {
    for (double a : orders) rdp.push_back(a / (2 * s * s));
    return rdp;
  }
  const QuadratureReference quad(q, s, *std::max_element(orders.begin(), orders.end()));
  for (double a : orders) rdp.push_back(quad.rdp(a));
  return rdp;
}

struct RefSpent {
  ld epsilon;
  double best_alpha;
};

// Balle et al. 2020, Theorem 21, written out again here rather than calling rdp_to_epsilon.
RefSpent reference_epsilon(const std::vector<double>& orders, const std::vector<ld>& rdp_one,
                           long long steps, ld delta) {
  RefSpent best{std::numeric_limits<ld>::infinity(), 0};
  for (size_t k = 0; k < orders.size(); ++k) {
    const ld a = orders[k];
    const ld eps = rdp_one[k] * steps - (std::log(delta) + std::log(a)) / (a - 1) +
                   std::log((a - 1) / a);
    if (eps < best.epsilon) best = {eps, orders[k]};
  }
  return best;
}

double rel_err(double got, ld want) {
  return static_cast<double>(std::fabs((static_cast<ld>(got) - want) / want));
}

using dpg::testing::contains;
using dpg::testing::error_message;

}  // namespace

TEST_CASE("default orders are Opacus's: 1.1..10.9 by 0.1, then 12..63") {
  const auto& o = dp::default_orders();
  REQUIRE(o.size() == 151);
  CHECK(o.front() == 1.1);
  CHECK(o[98] == 10.9);
  CHECK(o[99] == 12.0);
  CHECK(o.back() == 63.0);
  CHECK(std::find(o.begin(), o.end(), 11.0) == o.end());
  CHECK(std::is_sorted(o.begin(), o.end()));
  CHECK(o[9] == 2.0);  // 1 + 10/10.0 is exactly 2: the integer series handles it
}

TEST_CASE("Opacus reference: q=0.04, sigma=1.5, 2250 steps, delta=1e-5") {
  const dp::PrivacySpent s = dp::epsilon_for(0.04, 1.5, 2250, 1e-5, kRdp);
  CHECK(rel_err(s.epsilon, 7.32911117143L) < 1e-6);
  CHECK_FALSE(dp::at_grid_edge(dp::default_orders(), s.best_alpha));
}

TEST_CASE("calibration against Opacus's get_noise_multiplier") {
  // Opacus returns the upper end of a bisection stopped within 0.01 epsilon of the target.
  struct Case {
    long long steps;
    double opacus;
  };
  for (const Case c : {Case{2250, 1.416}, Case{2000, 1.3562}}) {
    CAPTURE(c.steps);
    const double sigma = dp::calibrate_noise_multiplier(0.04, c.steps, 1e-5, 8.0, kRdp);
    // Opacus's exact outputs are 1.416015625 and 1.35620117..., printed to 3 and 4 decimals.
    const double opacus_exact = c.steps == 2250 ? 1.416015625 : 1.3562011719;
    CHECK(std::fabs(opacus_exact - c.opacus) < 5e-4);
    CHECK(sigma <= opacus_exact);
    CHECK(sigma >= opacus_exact * (1 - 5e-3));
    CHECK(dp::epsilon_for(0.04, sigma, c.steps, 1e-5, kRdp).epsilon <= 8.0);
    CHECK(dp::epsilon_for(0.04, sigma * (1 - 2e-3), c.steps, 1e-5, kRdp).epsilon > 8.0);
  }
  CHECK(dp::steps_for_epochs(90, 0.04) == 2250);
}

TEST_CASE("calibration edge cases") {
  // Easy targets give small multipliers; the bracket also searches downwards from 1.
  const double small = dp::calibrate_noise_multiplier(0.5, 10, 1e-5, 30.0, kRdp);
  CHECK(small < 1.0);
  CHECK(dp::epsilon_for(0.5, small, 10, 1e-5, kRdp).epsilon <= 30.0);
  CHECK(dp::epsilon_for(0.5, small * (1 - 2e-3), 10, 1e-5, kRdp).epsilon > 30.0);
  // Large multipliers: q = 1, many steps.
  const double large = dp::calibrate_noise_multiplier(1.0, 100000, 1e-6, 1.0, kRdp);
  CHECK(large > 100.0);
  CHECK(dp::epsilon_for(1.0, large, 100000, 1e-6, kRdp).epsilon <= 1.0);
  // Below what orders up to 63 can certify at this delta, no noise is enough.
  CHECK(contains(
      error_message([] { dp::calibrate_noise_multiplier(0.01, 100, 1e-5, 0.05, kRdp); }),
      "target_epsilon"));
  CHECK(contains(error_message([] { dp::calibrate_noise_multiplier(0, 100, 1e-5, 1, kRdp); }),
                 "q"));
  CHECK(contains(error_message([] { dp::calibrate_noise_multiplier(0.1, 0, 1e-5, 1, kRdp); }),
                 "steps"));
  CHECK(contains(error_message([] { dp::calibrate_noise_multiplier(0.1, 10, 1, 1, kRdp); }),
                 "delta"));
}

TEST_CASE("calibration is fast") {
  const auto t0 = std::chrono::steady_clock::now();
  dp::calibrate_noise_multiplier(0.001, 50000, 1e-6, 2.0, kRdp);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(s < 1.0);  // about 0.005 s measured; generous for loaded CI machines
}

TEST_CASE("integer and fractional orders against quadrature") {
  for (double q : {0.01, 0.3}) {
    for (double s : {0.7, 1.5}) {
      const QuadratureReference quad(q, s, 64);
      for (double a : {2.0, 5.0, 17.0, 63.0, 1.05, 1.5, 2.5, 7.25, 10.9, 20.5}) {
        CAPTURE(q);
        CAPTURE(s);
        CAPTURE(a);
        const double got = dp::rdp_subsampled_gaussian(q, s, a);
        CHECK(rel_err(got, quad.rdp(a)) < 1e-8);
      }
    }
  }
  // q = 1 is the plain Gaussian mechanism; q = 0 leaks nothing.
  CHECK(dp::rdp_subsampled_gaussian(1.0, 2.0, 8.0) == doctest::Approx(1.0));
  CHECK(dp::rdp_subsampled_gaussian(0.0, 2.0, 8.0) == 0.0);
}

TEST_CASE("epsilon over a grid of (q, sigma, steps, delta) against quadrature") {
  const auto& orders = dp::default_orders();
  double worst_eps = 0;
  double worst_rdp = 0;
  for (double q : {0.001, 0.01, 0.05, 0.2, 0.5, 0.99, 1.0}) {
    for (double s : {0.5, 0.8, 1.0, 2.0, 4.0}) {
      const std::vector<ld> ref = reference_rdp(q, s, orders);
      const std::vector<double> ours = dp::rdp_subsampled_gaussian(q, s, 1, orders);
      for (size_t k = 0; k < orders.size(); ++k) {
        CAPTURE(q);
        CAPTURE(s);
        CAPTURE(orders[k]);
        // Like Opacus, the fractional series stops once its terms are below e^-30, which leaves
        // an absolute error of about 1e-13 in log A: visible (relative 3e-7) only where log A
        // itself is ~1e-7 (q = 0.001, alpha near 1), and then irrelevant to epsilon.
        const double e = rel_err(ours[k], ref[k]);
        const double log_a_err =
            static_cast<double>(std::fabs(ours[k] - ref[k]) * (orders[k] - 1));
        CHECK((e < 1e-8 || log_a_err < 2e-13));
        worst_rdp = std::max(worst_rdp, e);
      }
      for (long long steps : {1LL, 10LL, 1000LL, 50000LL}) {
        for (double delta : {1e-5, 1e-6}) {
          CAPTURE(q);
          CAPTURE(s);
          CAPTURE(steps);
          CAPTURE(delta);
          const dp::PrivacySpent got = dp::epsilon_for(q, s, steps, delta, kRdp);
          const RefSpent want = reference_epsilon(orders, ref, steps, delta);
          const double e = rel_err(got.epsilon, want.epsilon);
          CHECK(e < 5e-5);
          CHECK(got.best_alpha == want.best_alpha);
          worst_eps = std::max(worst_eps, e);
        }
      }
    }
  }
  MESSAGE("worst relative error: RDP (per step) " << worst_rdp << ", epsilon " << worst_eps);
}

TEST_CASE("rdp_to_epsilon: Balle et al. conversion, NaN ignored, arguments checked") {
  const std::vector<double> orders = {2.0, 4.0, 8.0};
  const std::vector<double> rdp = {0.1, 0.2, 0.4};
  const dp::PrivacySpent s = dp::rdp_to_epsilon(orders, rdp, 1e-5);
  const auto eps_at = [](double a, double r) {
    return r - (std::log(1e-5) + std::log(a)) / (a - 1) + std::log((a - 1) / a);
  };
  const double want = std::min({eps_at(2, 0.1), eps_at(4, 0.2), eps_at(8, 0.4)});
  CHECK(s.epsilon == doctest::Approx(want).epsilon(1e-14));
  CHECK(s.best_alpha == 8.0);
  CHECK(dp::at_grid_edge(orders, s.best_alpha));

  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> with_nan = {0.1, 0.2, nan};
  CHECK(dp::rdp_to_epsilon(orders, with_nan, 1e-5).best_alpha == 4.0);
  const std::vector<double> all_nan = {nan, nan, nan};
  const dp::PrivacySpent none = dp::rdp_to_epsilon(orders, all_nan, 1e-5);
  CHECK(std::isinf(none.epsilon));
  CHECK(std::isnan(none.best_alpha));

  const std::vector<double> short_rdp = {0.1};
  CHECK(contains(error_message([&] { dp::rdp_to_epsilon(orders, short_rdp, 1e-5); }), "rdp"));
  CHECK(contains(error_message([&] { dp::rdp_to_epsilon(orders, rdp, 0.0); }), "delta"));
  const std::vector<double> bad_orders = {1.0, 4.0, 8.0};
  CHECK(contains(error_message([&] { dp::rdp_to_epsilon(bad_orders, rdp, 1e-5); }), "alpha"));
}

TEST_CASE("arguments are checked and named") {
  CHECK(contains(error_message([] { dp::rdp_subsampled_gaussian(1.5, 1, 2); }), "q"));
  CHECK(contains(error_message([] { dp::rdp_subsampled_gaussian(-0.1, 1, 2); }), "q"));
  CHECK(contains(error_message([] { dp::rdp_subsampled_gaussian(0.1, 0, 2); }), "sigma"));
  CHECK(contains(error_message([] { dp::rdp_subsampled_gaussian(0.1, NAN, 2); }), "sigma"));
  CHECK(contains(error_message([] { dp::rdp_subsampled_gaussian(0.1, 1, 1); }), "alpha"));
  CHECK(contains(error_message([] { dp::epsilon_for(0.1, 1, -1, 1e-5, kRdp); }), "steps"));
  CHECK(contains(error_message([] { dp::epsilon_for(0.1, 1, 10, 1.5, kRdp); }), "delta"));
  CHECK(contains(error_message([] { dp::steps_for_epochs(0, 0.1); }), "epochs"));
  CHECK(contains(error_message([] { dp::steps_for_epochs(1, 0); }), "q"));
}

TEST_CASE("steps_for_epochs rounds up, forgiving binary rounding") {
  CHECK(dp::steps_for_epochs(90, 0.04) == 2250);
  CHECK(dp::steps_for_epochs(1, 0.3) == 4);
  CHECK(dp::steps_for_epochs(0.5, 1.0) == 1);
  CHECK(dp::steps_for_epochs(3, 0.1) == 30);
  CHECK(dp::steps_for_epochs(1, 256.0 / 60000.0) == 235);  // 234.375
}

TEST_CASE("Accountant (RDP): steps compose, merge, and match epsilon_for") {
  dp::Accountant one_by_one(kRdp);
  for (int i = 0; i < 100; ++i) one_by_one.step(0.01, 1.1);
  dp::Accountant at_once(kRdp);
  at_once.step(0.01, 1.1, 100);
  CHECK(one_by_one == at_once);
  CHECK(one_by_one.history().size() == 1);
  CHECK(one_by_one.steps() == 100);
  CHECK(one_by_one.spent(1e-5).epsilon == at_once.spent(1e-5).epsilon);
  CHECK(at_once.spent(1e-5).epsilon == dp::epsilon_for(0.01, 1.1, 100, 1e-5, kRdp).epsilon);

  dp::Accountant empty(kRdp);
  CHECK(empty.steps() == 0);
  CHECK(empty.spent(1e-5).epsilon == 0.0);
  empty.step(0.0, 1.0, 5);  // q = 0 reveals nothing
  CHECK(empty.spent(1e-5).epsilon == 0.0);
  empty.step(0.01, 1.0, 0);  // zero steps record nothing
  CHECK(empty.history().size() == 1);

  // Epsilon never decreases as steps accumulate.
  dp::Accountant acc(kRdp);
  double last = 0;
  for (int i = 0; i < 40; ++i) {
    acc.step(0.02, 1.0, 25);
    const double eps = acc.spent(1e-5).epsilon;
    CHECK(eps > last);
    last = eps;
  }

  // Heterogeneous history: RDP adds across segments, whatever their order.
  dp::Accountant mixed(kRdp);
  mixed.step(0.01, 1.0, 300);
  mixed.step(0.05, 2.0, 200);
  mixed.step(0.01, 1.0, 100);
  CHECK(mixed.history().size() == 3);
  const auto& orders = dp::default_orders();
  std::vector<double> sum = dp::rdp_subsampled_gaussian(0.01, 1.0, 400, orders);
  const std::vector<double> b = dp::rdp_subsampled_gaussian(0.05, 2.0, 200, orders);
  for (size_t k = 0; k < sum.size(); ++k) sum[k] += b[k];
  CHECK(mixed.spent(1e-5).epsilon ==
        doctest::Approx(dp::rdp_to_epsilon(orders, sum, 1e-5).epsilon).epsilon(1e-12));
}

TEST_CASE("Accountant (RDP): spent() for 50,000 steps costs one evaluation per (q, sigma)") {
  dp::Accountant acc(kRdp);
  for (int i = 0; i < 50000; ++i) acc.step(i % 2 ? 0.01 : 0.02, 1.0);  // 50,000 segments
  CHECK(acc.history().size() == 50000);
  const auto t0 = std::chrono::steady_clock::now();
  const double eps = acc.spent(1e-5).epsilon;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(s < 0.5);  // a few milliseconds measured
  dp::Accountant grouped(kRdp);
  grouped.step(0.01, 1.0, 25000);
  grouped.step(0.02, 1.0, 25000);
  CHECK(eps == doctest::Approx(grouped.spent(1e-5).epsilon).epsilon(1e-12));
}

TEST_CASE("Accountant: JSON round trip, the earlier format, and validation") {
  dp::Accountant acc(kRdp);
  acc.step(0.01, 1.1, 1234);
  acc.step(1.0 / 3.0, 0.7 + 1e-12, 7);
  const nlohmann::json j = acc.to_json();
  CHECK(j.at("mechanism") == "poisson_gaussian");
  CHECK(j.at("accountant") == "rdp");
  CHECK(j.at("history").size() == 2);
  CHECK(j.at("history")[1].at("steps") == 7);
  const dp::Accountant back = dp::Accountant::from_json(nlohmann::json::parse(j.dump()));
  CHECK(back == acc);
  CHECK(back.kind() == kRdp);
  CHECK(back.steps() == 1241);
  CHECK(back.spent(1e-5).epsilon == acc.spent(1e-5).epsilon);

  // A PLD account keeps its kind; the same history evaluates under either.
  dp::Accountant pld;
  pld.step(0.01, 1.1, 1234);
  pld.step(1.0 / 3.0, 0.7 + 1e-12, 7);
  CHECK(pld.kind() == dp::AccountantKind::pld);
  CHECK(pld.to_json().at("accountant") == "pld");
  CHECK(pld.to_json().at("history") == j.at("history"));
  const dp::Accountant pld_back = dp::Accountant::from_json(pld.to_json());
  CHECK(pld_back == pld);
  CHECK(pld_back.spent(1e-5).epsilon == pld.spent(1e-5).epsilon);
  CHECK(pld.spent(1e-5, kRdp).epsilon == acc.spent(1e-5).epsilon);
  CHECK(pld.spent(1e-5).epsilon < acc.spent(1e-5).epsilon);
  CHECK(std::isnan(pld.spent(1e-5).best_alpha));

  // What earlier builds wrote reads back as an RDP account with the same history.
  const nlohmann::json legacy = {{"mechanism", "poisson_gaussian_rdp"},
                                 {"history", j.at("history")}};
  const dp::Accountant old = dp::Accountant::from_json(legacy);
  CHECK(old == acc);

  const auto error_for = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json bad = j;
    edit(bad);
    return error_message([&] { dp::Accountant::from_json(bad, "ckpt.json:"); });
  };
  CHECK(contains(error_for([](auto& b) { b["history"][1]["sigma"] = -1; }),
                 "ckpt.json:/history/1/sigma"));
  CHECK(contains(error_for([](auto& b) { b["history"][0]["q"] = 1.5; }),
                 "ckpt.json:/history/0/q"));
  CHECK(contains(error_for([](auto& b) { b["history"][0]["steps"] = 2.5; }),
                 "ckpt.json:/history/0/steps"));
  CHECK(contains(error_for([](auto& b) { b["history"][0]["steps"] = 0; }),
                 "ckpt.json:/history/0/steps"));
  CHECK(contains(error_for([](auto& b) { b["history"][0].erase("steps"); }),
                 "ckpt.json:/history/0/steps"));
  CHECK(contains(error_for([](auto& b) { b["history"][0]["noise"] = 1; }),
                 "ckpt.json:/history/0/noise"));
  CHECK(contains(error_for([](auto& b) { b["history"][1] = 3; }), "ckpt.json:/history/1"));
  CHECK(contains(error_for([](auto& b) { b["history"] = "none"; }), "ckpt.json:/history"));
  CHECK(contains(error_for([](auto& b) { b["mechanism"] = "laplace"; }), "ckpt.json:/mechanism"));
  CHECK(contains(error_for([](auto& b) { b.erase("mechanism"); }), "ckpt.json:/mechanism"));
  CHECK(contains(error_for([](auto& b) { b["extra"] = 1; }), "ckpt.json:/extra"));
  CHECK(contains(error_for([](auto& b) { b["accountant"] = "gdp"; }), "ckpt.json:/accountant"));
  CHECK(contains(error_for([](auto& b) { b.erase("accountant"); }), "ckpt.json:/accountant"));
  // The earlier format has no accountant field: one there is unknown.
  nlohmann::json legacy_bad = legacy;
  legacy_bad["accountant"] = "pld";
  CHECK(contains(error_message([&] { dp::Accountant::from_json(legacy_bad, "ckpt.json:"); }),
                 "ckpt.json:/accountant"));
  CHECK(contains(error_message([] { dp::Accountant::from_json(nlohmann::json::array()); }),
                 "accountant:"));
}

TEST_CASE("Accountant (Skellam): composition, merging, JSON and the mechanisms kept apart") {
  using dpg::testing::contains;
  using dpg::testing::error_message;
  auto acc = dp::Accountant::skellam();
  CHECK(acc.is_skellam());
  CHECK(acc.kind() == kRdp);
  CHECK(acc.spent(1e-5).epsilon == 0.0);
  acc.step_skellam(0.01, 4e9, 2e7, 7e4, 300);
  acc.step_skellam(0.01, 4e9, 2e7, 7e4, 200);  // merges
  CHECK(acc.skellam_history().size() == 1);
  CHECK(acc.spent(1e-5).epsilon == dp::skellam_epsilon(0.01, 4e9, 2e7, 7e4, 500, 1e-5).epsilon);
  // PLD is for the Gaussian: a Skellam account is evaluated by RDP whatever is asked.
  CHECK(acc.spent(1e-5, dp::AccountantKind::pld).epsilon == acc.spent(1e-5).epsilon);
  // Two settings compose order by order: between the larger part and the sum of the parts.
  acc.step_skellam(0.02, 4e9, 2e7, 7e4, 100);
  CHECK(acc.steps() == 600);
  const double both = acc.spent(1e-5).epsilon;
  const double a = dp::skellam_epsilon(0.01, 4e9, 2e7, 7e4, 500, 1e-5).epsilon;
  const double b = dp::skellam_epsilon(0.02, 4e9, 2e7, 7e4, 100, 1e-5).epsilon;
  CHECK(both > std::max(a, b));
  CHECK(both < a + b);
  const auto j = acc.to_json();
  CHECK(j["mechanism"] == "poisson_skellam");
  CHECK(dp::Accountant::from_json(j) == acc);
  CHECK(dp::Accountant::from_json(j).spent(1e-5).epsilon == both);

  CHECK(contains(error_message([&] { acc.step(0.01, 1.0); }), "Gaussian step on a Skellam"));
  dp::Accountant g(kRdp);
  CHECK(contains(error_message([&] { g.step_skellam(0.01, 1e9, 1, 1); }), "Skellam step on a Gaussian"));
  CHECK(contains(error_message([&] { acc.step_skellam(0.01, 0, 1, 1); }), "mu"));
  auto bad = j;
  bad["history"][0].erase("mu");
  CHECK(contains(error_message([&] { dp::Accountant::from_json(bad, "ck.json:"); }),
                 "ck.json:/history/0"));
  bad = j;
  bad["history"][0]["sigma"] = 1.0;
  CHECK(contains(error_message([&] { dp::Accountant::from_json(bad, "ck.json:"); }), "sigma"));
  bad = j;
  bad["accountant"] = "pld";
  CHECK(contains(error_message([&] { dp::Accountant::from_json(bad, "ck.json:"); }),
                 "ck.json:/accountant"));
}

TEST_CASE("accountant kinds by name") {
  CHECK(dp::parse_accountant_kind("pld") == dp::AccountantKind::pld);
  CHECK(dp::parse_accountant_kind("rdp") == kRdp);
  CHECK(dp::to_string(dp::AccountantKind::pld) == "pld");
  CHECK(dp::to_string(kRdp) == "rdp");
  CHECK(contains(error_message([] { dp::parse_accountant_kind("prv"); }), "expected pld or rdp"));
}
