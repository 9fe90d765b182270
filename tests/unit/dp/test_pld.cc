// The PLD accountant against published figures (Google's dp_accounting, Opacus's PRV test), the
// exact (epsilon, delta) of the Gaussian mechanism (Balle and Wang 2018), one subsampled step by
// quadrature of the two densities, and the RDP accountant's bound over a grid of cases.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dp/accountant.h"
#include "dp/pld.h"
#include "dp/pld_step.h"
#include "runtime/core/error.h"

namespace dp = dpg::dp;
using dp::PldEstimate;

namespace {

std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::invalid_argument);
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

double pld_eps(double q, double sigma, long long steps, double delta, PldEstimate e,
               dp::PldOptions o = {}) {
  const dp::PoissonGaussian run{q, sigma, steps};
  return dp::pld_epsilon({&run, 1}, delta, e, o).value;
}

double rdp_eps(double q, double sigma, long long steps, double delta) {
  return dp::epsilon_for(q, sigma, steps, delta, dp::AccountantKind::rdp).epsilon;
}

double phi(double z) { return 0.5 * std::erfc(-z / std::numbers::sqrt2); }

// Smallest eps >= 0 with delta_of(eps) <= delta, for a non-increasing delta_of, by bisection.
double invert(const std::function<double(double)>& delta_of, double delta) {
  if (delta_of(0.0) <= delta) return 0.0;
  double lo = 0.0, hi = 1.0;
  while (delta_of(hi) > delta) hi *= 2;
  for (int i = 0; i < 64; ++i) {
    const double mid = 0.5 * (lo + hi);
    (delta_of(mid) > delta ? lo : hi) = mid;
  }
  return hi;
}

// The Gaussian mechanism with sensitivity 1 and noise sd s, composed T times (one Gaussian with
// mu = sqrt(T) / s): delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)
// (Balle and Wang 2018, Theorem 8).
double gaussian_epsilon(double sigma, long long steps, double delta) {
  const double mu = std::sqrt(static_cast<double>(steps)) / sigma;
  return invert([&](double eps) {
    return phi(mu / 2 - eps / mu) - std::exp(eps) * phi(-mu / 2 - eps / mu);
  }, delta);
}

// One step of the subsampled Gaussian by quadrature of its definition, in both directions:
//   remove: P = (1-q) N(0, s^2) + q N(-1, s^2), Q = N(0, s^2)
//   add:    P = N(0, s^2), Q = (1-q) N(0, s^2) + q N(1, s^2)
// delta(eps) = integral of (P - e^eps Q)_+. The loss log(P/Q) falls as x grows, so the integrand
// is positive exactly left of the x* where the loss is eps (found by bisection): Simpson's rule
// on [x* - 40 s, x*] with 2^13 panels (error ~ (40 s / 2^13)^4), in long double.
double one_step_delta(double q, double s, double eps) {
  using ld = long double;
  const ld sd = s;
  const auto log_n = [&](ld x, ld m) {
    return -0.5L * ((x - m) / sd) * ((x - m) / sd) -
           std::log(sd * std::sqrt(2 * std::numbers::pi_v<ld>));
  };
  const auto mix = [&](ld x, ld shift) {  // log((1-q) N(0) + q N(shift)) at x
    const ld a = std::log1p(-static_cast<ld>(q)) + log_n(x, 0);
    const ld b = std::log(static_cast<ld>(q)) + log_n(x, shift);
    return std::max(a, b) + std::log1p(std::exp(-std::fabs(a - b)));
  };
  double worst = 0;
  for (int dir = 0; dir < 2; ++dir) {
    const auto lp = [&](ld x) { return dir == 0 ? mix(x, -1) : log_n(x, 0); };
    const auto lq = [&](ld x) { return dir == 0 ? log_n(x, 0) : mix(x, 1); };
    const auto f = [&](ld x) {
      const ld d = eps + lq(x) - lp(x);
      return d < 0 ? std::exp(lp(x)) * -std::expm1(d) : 0.0L;
    };
    ld lo = -60 * sd - 2, hi = 60 * sd + 2;  // loss(lo) > eps >= loss(hi), when eps is reached
    if (lp(lo) - lq(lo) <= eps) continue;    // no loss above eps: this direction adds nothing
    for (int i = 0; i < 80; ++i) {
      const ld mid = (lo + hi) / 2;
      (lp(mid) - lq(mid) > eps ? lo : hi) = mid;
    }
    const ld a = hi - 40 * sd, b = hi;
    const int panels = 1 << 13;
    const ld h = (b - a) / panels;
    ld sum = f(a) + f(b);
    for (int i = 1; i < panels; ++i) sum += f(a + h * i) * (i % 2 ? 4 : 2);
    worst = std::max(worst, static_cast<double>(sum * h / 3));
  }
  return worst;
}

}  // namespace

TEST_CASE("dp_accounting's published PLD epsilons") {
  // dp_accounting's PLDAccountant (value_discretization_interval 1e-4, connect-the-dots), delta
  // 1e-5: epsilon 3.69974 for (q 0.05, sigma 2, 1000 steps), 3.44434 for (q 0.1, sigma 4, 1000).
  dp::PldOptions fine;
  fine.interval = 1e-4;  // theirs: the same construction gives the same digits
  CHECK(std::fabs(pld_eps(0.05, 2, 1000, 1e-5, PldEstimate::pessimistic, fine) - 3.69974) < 1e-5);
  CHECK(std::fabs(pld_eps(0.1, 4, 1000, 1e-5, PldEstimate::pessimistic, fine) - 3.44434) < 1e-5);
  // The default interval keeps 4 significant digits.
  CHECK(std::fabs(pld_eps(0.05, 2, 1000, 1e-5, PldEstimate::pessimistic) - 3.69974) < 5e-4);
  CHECK(std::fabs(pld_eps(0.1, 4, 1000, 1e-5, PldEstimate::pessimistic) - 3.44434) < 5e-4);
}

TEST_CASE("Opacus's PRV accountant test case, and RDP's looser bound") {
  // Opacus 1.5's test_prv_accountant: q 0.04, sigma 1.5, 2250 steps, delta 1e-5 gives
  // 6.777395712150674, the PRV accountant's upper bound with eps_error 0.01, so the true epsilon
  // lies in [6.7574, 6.7774]; RDP gives 7.32911.
  const double pess = pld_eps(0.04, 1.5, 2250, 1e-5, PldEstimate::pessimistic);
  const double opt = pld_eps(0.04, 1.5, 2250, 1e-5, PldEstimate::optimistic);
  MESSAGE("PLD on Opacus's case: " << opt << " <= eps <= " << pess);
  CHECK(pess <= 6.777395712150674);
  CHECK(pess >= 6.777395712150674 - 0.02);
  CHECK(opt <= pess);
  CHECK(std::fabs(rdp_eps(0.04, 1.5, 2250, 1e-5) - 7.32911117143) < 1e-6);
}

TEST_CASE("q = 1: the Gaussian mechanism's exact epsilon lies between the two estimates") {
  struct Case {
    double sigma;
    long long steps;
    double delta;
  };
  for (const Case c : {Case{1, 1, 1e-5}, Case{0.5, 1, 1e-3}, Case{2, 10, 1e-5},
                       Case{5, 100, 1e-6}, Case{20, 1000, 1e-5}, Case{60, 20000, 1e-5}}) {
    CAPTURE(c.sigma);
    CAPTURE(c.steps);
    const double exact = gaussian_epsilon(c.sigma, c.steps, c.delta);
    const double pess = pld_eps(1.0, c.sigma, c.steps, c.delta, PldEstimate::pessimistic);
    const double opt = pld_eps(1.0, c.sigma, c.steps, c.delta, PldEstimate::optimistic);
    CAPTURE(exact);
    CAPTURE(pess);
    CAPTURE(opt);
    CHECK(pess >= exact);  // never below the true epsilon
    CHECK(opt <= exact);
    CHECK(pess - exact < 1e-3);
    CHECK(exact - opt <= static_cast<double>(c.steps) * dp::kPldDefaultInterval + 1e-3);
  }
}

TEST_CASE("small delta: an upper bound at kPldMinDelta, refused below it") {
  // The hardest of the exact-Gaussian grid (docs/PRIVACY.md), epsilon 10 to 47 at delta 1e-12:
  // with the forward transforms in double the pessimistic estimate fell below the exact epsilon
  // here, by 0.012 (s 0.2, 1000 steps), 0.051 (s 0.3, 30000) and 0.0099 (s 0.7, 30000).
  struct Case {
    double s;  // the composed mechanism's sigma / sqrt(steps)
    long long steps;
    double exact;  // at delta 1e-12, mpmath at 50 digits (the docs' grid)
  };
  REQUIRE(dp::kPldMinDelta == 1e-12);
  for (const Case c : {Case{0.2, 1000, 47.049232}, Case{0.3, 30000, 28.467267},
                       Case{0.7, 30000, 10.708964}}) {
    const double sigma = c.s * std::sqrt(static_cast<double>(c.steps));
    CAPTURE(sigma);
    CAPTURE(c.steps);
    const double exact = gaussian_epsilon(sigma, c.steps, dp::kPldMinDelta);
    const double pess = pld_eps(1.0, sigma, c.steps, dp::kPldMinDelta, PldEstimate::pessimistic);
    CAPTURE(exact);
    CAPTURE(pess);
    CHECK(std::fabs(exact - c.exact) < 1e-5);  // this file's reference agrees with mpmath's
    CHECK(pess >= exact);
    CHECK(pess - exact < 1e-3);
    // And the delta at the exact epsilon is at least the exact delta (pld_delta goes to long
    // double when its double estimate is small).
    const dp::PoissonGaussian run{1.0, sigma, c.steps};
    CHECK(dp::pld_delta({&run, 1}, exact, PldEstimate::pessimistic).value >= dp::kPldMinDelta);
    const std::string why = error_message(
        [&] { pld_eps(1.0, sigma, c.steps, dp::kPldMinDelta / 10, PldEstimate::pessimistic); });
    CHECK(contains(why, "the PLD accountant is checked down to 1e-12"));
    CHECK(contains(why, "use the RDP accountant"));
  }
}

TEST_CASE("one subsampled step: the exact epsilon (quadrature) lies between the estimates") {
  struct Case {
    double q, sigma, delta;
  };
  for (const Case c : {Case{0.01, 0.7, 1e-5}, Case{0.1, 1.0, 1e-5}, Case{0.5, 2.0, 1e-3},
                       Case{0.9, 0.8, 1e-5}}) {
    CAPTURE(c.q);
    CAPTURE(c.sigma);
    const double exact = invert([&](double e) { return one_step_delta(c.q, c.sigma, e); },
                                c.delta);
    const double pess = pld_eps(c.q, c.sigma, 1, c.delta, PldEstimate::pessimistic);
    const double opt = pld_eps(c.q, c.sigma, 1, c.delta, PldEstimate::optimistic);
    CAPTURE(exact);
    CAPTURE(pess);
    CAPTURE(opt);
    CHECK(pess >= exact);  // connect-the-dots: exact at grid points, above the truth between
    CHECK(opt <= exact);
    CHECK(pess - exact < 1e-6);
    CHECK(exact - opt < dp::kPldDefaultInterval);  // one loss rounded down by less than h
    // delta at a given epsilon brackets the true delta too.
    const dp::PoissonGaussian one{c.q, c.sigma, 1};
    const double d = one_step_delta(c.q, c.sigma, exact);
    CHECK(dp::pld_delta({&one, 1}, exact, PldEstimate::pessimistic).value >= d);
    CHECK(dp::pld_delta({&one, 1}, exact, PldEstimate::optimistic).value <= d);
  }
}

TEST_CASE("a grid of cases: optimistic <= pessimistic <= RDP, and the gap is about steps * h / 2") {
  // The optimistic estimate rounds every loss down, by h / 2 on average, so its epsilon sits
  // about steps * h / 2 below (h the interval used, larger than the default where epsilon is in
  // the hundreds); the pessimistic one is within 1e-6 (one step) to 1e-3 of the truth (above).
  double worst_excess = -1;
  for (double q : {0.001, 0.01, 0.05, 0.2}) {
    for (double sigma : {0.7, 1.0, 2.0, 5.0}) {
      for (long long steps : {1LL, 30LL, 1000LL, 4000LL}) {
        CAPTURE(q);
        CAPTURE(sigma);
        CAPTURE(steps);
        const dp::PoissonGaussian run{q, sigma, steps};
        const dp::PldResult pess = dp::pld_epsilon({&run, 1}, 1e-5, PldEstimate::pessimistic);
        const dp::PldResult opt = dp::pld_epsilon({&run, 1}, 1e-5, PldEstimate::optimistic);
        const double rdp = rdp_eps(q, sigma, steps, 1e-5);
        CAPTURE(pess.value);
        CAPTURE(opt.value);
        CAPTURE(pess.interval);
        CAPTURE(rdp);
        CHECK(std::isfinite(pess.value));
        CHECK(opt.value <= pess.value);
        CHECK(pess.value <= rdp);
        const double half_rounding = static_cast<double>(steps) * opt.interval / 2;
        CHECK(pess.value - opt.value <= half_rounding + 2e-3);
        worst_excess = std::max(worst_excess, pess.value - opt.value - half_rounding);
      }
    }
  }
  MESSAGE("largest (pessimistic - optimistic) - steps * h / 2 over the grid: " << worst_excess);
}

TEST_CASE("histories compose: merged segments, any order, monotone") {
  const double delta = 1e-5;
  const std::vector<dp::PoissonGaussian> split = {{0.05, 2.0, 300}, {0.05, 2.0, 700}};
  const dp::PoissonGaussian whole{0.05, 2.0, 1000};
  CHECK(dp::pld_epsilon(split, delta, PldEstimate::pessimistic).value ==
        dp::pld_epsilon({&whole, 1}, delta, PldEstimate::pessimistic).value);

  const std::vector<dp::PoissonGaussian> mixed = {{0.01, 1.0, 300}, {0.05, 2.0, 200},
                                                  {0.01, 1.0, 100}};
  const std::vector<dp::PoissonGaussian> reordered = {{0.05, 2.0, 200}, {0.01, 1.0, 400}};
  const double both = dp::pld_epsilon(mixed, delta, PldEstimate::pessimistic).value;
  CHECK(both == doctest::Approx(dp::pld_epsilon(reordered, delta, PldEstimate::pessimistic).value)
                    .epsilon(1e-9));
  const double a = pld_eps(0.01, 1.0, 400, delta, PldEstimate::pessimistic);
  const double b = pld_eps(0.05, 2.0, 200, delta, PldEstimate::pessimistic);
  CHECK(both > std::max(a, b));
  CHECK(both < a + b);  // composition beats adding epsilons
  CHECK(dp::pld_epsilon(mixed, delta, PldEstimate::optimistic).value <= both);
  dp::Accountant acc(dp::AccountantKind::rdp);
  for (const auto& s : mixed) acc.step(s.q, s.sigma, s.steps);
  CHECK(both <= acc.spent(delta).epsilon);

  // Nothing recorded, or only q = 0: epsilon 0, delta 0.
  CHECK(dp::pld_epsilon({}, delta, PldEstimate::pessimistic).value == 0.0);
  const dp::PoissonGaussian none{0.0, 1.0, 100};
  CHECK(dp::pld_epsilon({&none, 1}, delta, PldEstimate::pessimistic).value == 0.0);
  CHECK(dp::pld_delta({&none, 1}, 0.5, PldEstimate::pessimistic).value == 0.0);

  // Epsilon grows with the steps.
  double last = 0;
  for (long long t : {1LL, 10LL, 100LL, 500LL}) {
    const double e = pld_eps(0.1, 1.0, t, delta, PldEstimate::pessimistic);
    CHECK(e > last);
    last = e;
  }
}

TEST_CASE("bounded grids: a coarser interval stays an upper bound, and is reported") {
  // sigma 0.05 puts the one-step losses up to about 400: too many points at 1e-4.
  const dp::PoissonGaussian hard{1.0, 0.05, 1};
  const dp::PldResult r = dp::pld_epsilon({&hard, 1}, 1e-5, PldEstimate::pessimistic);
  CHECK(r.interval > dp::kPldDefaultInterval);
  const double exact = gaussian_epsilon(0.05, 1, 1e-5);
  CHECK(r.value >= exact);
  CHECK(r.value < exact * 1.01);
  CHECK(dp::pld_epsilon({&hard, 1}, 1e-5, PldEstimate::optimistic).value <= exact);

  // A small max_points forces coarsening of an ordinary case: still above the fine estimate.
  dp::PldOptions small;
  small.max_points = 4096;
  const dp::PoissonGaussian run{0.05, 2.0, 1000};
  const dp::PldResult coarse = dp::pld_epsilon({&run, 1}, 1e-5, PldEstimate::pessimistic, small);
  CHECK(coarse.interval > dp::kPldDefaultInterval);
  const double fine = pld_eps(0.05, 2.0, 1000, 1e-5, PldEstimate::pessimistic);
  CHECK(coarse.value >= fine - 1e-6);
  CHECK(coarse.value < fine + 0.05);
}

TEST_CASE("almost no noise: the estimates stay ordered up to where a double holds the loss") {
  // Tiny sigmas coarsen the grid past h = 709.78, where e^h overflows: the pessimistic PMF must
  // still hold its mass (it once gave NaN there, which epsilon_of read as epsilon 0).
  // Each takes about a second (the grid is max_points wide): a few, spread over the range.
  const std::vector<dp::PoissonGaussian> runs = {
      {0.01, 3e-5, 10}, {1.0, 3e-5, 1}, {0.5, 1e-20, 10}, {0.01, 1e-150, 1}};
  for (const dp::PoissonGaussian& run : runs) {
    const double q = run.q, sigma = run.sigma;
    const long long steps = run.steps;
    CAPTURE(sigma);
    CAPTURE(q);
    CAPTURE(steps);
    const dp::PldResult pess = dp::pld_epsilon({&run, 1}, 1e-5, PldEstimate::pessimistic);
    const double opt = pld_eps(q, sigma, steps, 1e-5, PldEstimate::optimistic);
    const double rdp = rdp_eps(q, sigma, steps, 1e-5);
    CAPTURE(pess.value);
    CAPTURE(pess.interval);
    CAPTURE(opt);
    CAPTURE(rdp);
    CHECK(pess.interval > 709.79);  // past e^h's overflow
    CHECK(std::isfinite(pess.value));
    CHECK(opt <= pess.value);
    CHECK(pess.value <= rdp);
    // Without subsampling one step of the Gaussian mechanism loses about 1 / (2 sigma^2).
    CHECK(pess.value >= 0.5 / (sigma * sigma));
    const double eps = 0.25 / (sigma * sigma);
    CHECK(dp::pld_delta({&run, 1}, eps, PldEstimate::pessimistic).value >=
          dp::pld_delta({&run, 1}, eps, PldEstimate::optimistic).value);
  }
  // Below about 1e-154 sigma^2 underflows and the loss is no longer a double: no privacy at all.
  for (double sigma : {1e-160, 1e-300}) {
    CAPTURE(sigma);
    const dp::PoissonGaussian run{0.5, sigma, 10};
    CHECK(pld_eps(0.5, sigma, 10, 1e-5, PldEstimate::pessimistic) ==
          std::numeric_limits<double>::infinity());
    CHECK(pld_eps(0.5, sigma, 10, 1e-5, PldEstimate::optimistic) ==
          std::numeric_limits<double>::infinity());
    CHECK(dp::pld_delta({&run, 1}, 1e6, PldEstimate::pessimistic).value == 1.0);
  }
}

TEST_CASE("PLD calibration: the default recipe needs sigma 2.46 where RDP needs 2.63") {
  const double q = 4096.0 / 60000;
  const long long steps = dp::steps_for_epochs(40, q);
  CHECK(steps == 586);
  const double pld = dp::calibrate_noise_multiplier(q, steps, 1e-5, 3, dp::AccountantKind::pld);
  const double rdp = dp::calibrate_noise_multiplier(q, steps, 1e-5, 3, dp::AccountantKind::rdp);
  MESSAGE("sigma for epsilon 3: PLD " << pld << ", RDP " << rdp);
  CHECK(std::fabs(pld - 2.46) < 0.01);
  CHECK(std::fabs(rdp - 2.634) < 0.001);
  CHECK(pld_eps(q, pld, steps, 1e-5, PldEstimate::pessimistic) <= 3.0);
  CHECK(pld_eps(q, pld * (1 - 2e-3), steps, 1e-5, PldEstimate::pessimistic) > 3.0);
}

// The composition's window rests on every order's moment of the step PMF, computed for all
// orders in one pass (pld_detail::decayed_sums): each must be the plain walk's sum, bit for bit,
// including where a weight stops early (fast decays) and where the sum stays tiny for long.
TEST_CASE("the window's moments: all orders in one pass give each order's own walk") {
  namespace pd = dp::pld_detail;
  const auto walk = [](const std::vector<double>& p, double decay, bool forward) {
    double w = 1, sum = 0;
    for (std::size_t j = 0; j < p.size(); ++j) {
      sum += p[forward ? j : p.size() - 1 - j] * w;
      w *= decay;
    }
    return sum;
  };
  const auto decays = [](double interval) {  // exp(-2^k h), k = -24..12, as dp/pld.cc's orders
    pd::DecaySums d;
    for (std::size_t k = 0; k < pd::kDecays; ++k)
      d[k] = std::exp(-std::ldexp(1.0, static_cast<int>(k) - 24) * interval);
    return d;
  };
  std::vector<std::vector<double>> pmfs;
  for (const auto dir : {pd::Direction::remove, pd::Direction::add}) {
    pmfs.push_back(pd::StepLoss(0.032, 0.88, dir).pessimistic(1e-4).probs);
    pmfs.push_back(pd::StepLoss(0.004, 0.62, dir).optimistic(1e-4).probs);
    pmfs.push_back(pd::StepLoss(1.0, 2.0, dir).pessimistic(1e-3).probs);
  }
  // Zeros, then masses that keep the sum below the stopping rule's floor for a while.
  std::vector<double> tiny(3000, 0.0);
  for (std::size_t j = 1000; j < tiny.size(); ++j) tiny[j] = std::ldexp(1.0, -1000 + static_cast<int>(j % 97));
  pmfs.push_back(tiny);
  pmfs.push_back({0.25});
  for (const double interval : {1e-4, 0.05, 3.0}) {
    const pd::DecaySums d = decays(interval);
    for (std::size_t m = 0; m < pmfs.size(); ++m) {
      for (const bool forward : {true, false}) {
        const pd::DecaySums got = pd::decayed_sums(pmfs[m], d, forward);
        for (std::size_t k = 0; k < pd::kDecays; ++k) {
          INFO("pmf " << m << " of " << pmfs[m].size() << " points, interval " << interval
                      << ", order 2^" << static_cast<int>(k) - 24 << (forward ? ", forward" : ", backward"));
          CHECK(got[k] == walk(pmfs[m], d[k], forward));
        }
      }
    }
  }
}

TEST_CASE("threads may compute at once") {
  const double want = pld_eps(0.02, 1.2, 300, 1e-5, PldEstimate::pessimistic);
  std::vector<double> got(4);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] {
      // Different sizes too, so that the threads plan transforms at the same time.
      got[i] = pld_eps(0.02, 1.2 + 0.1 * static_cast<double>(i % 2), 300 + 100 * i, 1e-5,
                       PldEstimate::pessimistic);
    });
  }
  for (auto& t : threads) t.join();
  CHECK(got[0] == want);
  CHECK(got[2] == pld_eps(0.02, 1.2, 500, 1e-5, PldEstimate::pessimistic));
}

TEST_CASE("threads at once over more transform lengths than keep their plans") {
  // Windows from a few thousand points to about a million, on six threads, twice over: lengths
  // are planned, evicted and planned again while other threads transform with them. Each
  // figure equals the one computed alone afterwards.
  const std::vector<long long> steps = {20, 150, 900, 3000, 8000, 20000};
  std::vector<double> together(2 * steps.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < together.size(); ++i) {
    threads.emplace_back([&, i] {
      together[i] = pld_eps(0.01, 0.8, steps[i % steps.size()], 1e-5, PldEstimate::pessimistic);
    });
  }
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < together.size(); ++i) {
    CAPTURE(i);
    CHECK(together[i] == pld_eps(0.01, 0.8, steps[i % steps.size()], 1e-5, PldEstimate::pessimistic));
  }
}

TEST_CASE("a thread's kept buffers change no figure: windows of every size, one or several mechanisms, handed back") {
  // Each history's figure on a fresh thread (nothing kept), then all of them on one thread in
  // an order that grows and shrinks the window, switches between one mechanism (whose spectrum
  // is its own product) and several (a product of its own) and between the double and the
  // long double transforms, and hands the buffers back midway: the same figures, bit for bit.
  using History = std::vector<dp::PoissonGaussian>;
  const std::vector<std::pair<History, double>> cases = {
      {{{0.05, 2.0, 1000}}, 1e-5},
      {{{0.01, 1.0, 300}, {0.05, 2.0, 200}}, 1e-5},
      {{{0.02, 1.2, 50}}, 1e-5},
      {{{0.004, 0.6, 256}}, 1e-8},
      {{{0.1, 1.5, 20}, {0.02, 0.9, 400}, {0.3, 3.0, 10}}, 1e-7},
      {{{0.05, 2.0, 1000}}, 1e-5},
  };
  const auto figure = [](const std::pair<History, double>& c) {
    return dp::pld_epsilon(c.first, c.second, PldEstimate::pessimistic).value;
  };
  std::vector<double> fresh(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    std::thread([&, i] { fresh[i] = figure(cases[i]); }).join();
  }
  std::vector<double> kept(cases.size()), after(cases.size());
  std::thread([&] {
    for (std::size_t i = 0; i < cases.size(); ++i) kept[i] = figure(cases[i]);
    for (std::size_t i = cases.size(); i-- > 0;) {
      after[i] = figure(cases[i]);
      if (i == 3) dp::pld_release_memory();
    }
  }).join();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(i);
    CHECK(kept[i] == fresh[i]);
    CHECK(after[i] == fresh[i]);
  }
  dp::pld_release_memory();  // twice, and on a thread that holds nothing: harmless
  dp::pld_release_memory();
}

TEST_CASE("arguments are checked and named") {
  const auto eps = [](double q, double s, long long t, double d) {
    return [=] { pld_eps(q, s, t, d, PldEstimate::pessimistic); };
  };
  CHECK(contains(error_message(eps(1.5, 1, 10, 1e-5)), "q"));
  CHECK(contains(error_message(eps(0.1, 0, 10, 1e-5)), "sigma"));
  CHECK(contains(error_message(eps(0.1, NAN, 10, 1e-5)), "sigma"));
  CHECK(contains(error_message(eps(0.1, 1, -1, 1e-5)), "steps"));
  CHECK(contains(error_message(eps(0.1, 1, 10, 0)), "delta"));
  CHECK(contains(error_message(eps(0.1, 1, 10, 1)), "delta"));
  CHECK(contains(error_message(eps(0.1, 1, dp::kPldMaxSteps + 1, 1e-5)), "steps"));
  dp::PldOptions bad;
  bad.interval = 0;
  CHECK(contains(error_message([&] { pld_eps(0.1, 1, 10, 1e-5, PldEstimate::pessimistic, bad); }),
                 "interval"));
  const dp::PoissonGaussian run{0.1, 1, 10};
  CHECK(contains(error_message([&] {
                   dp::pld_delta({&run, 1}, std::numeric_limits<double>::infinity(),
                                 PldEstimate::pessimistic);
                 }),
                 "epsilon"));
}
