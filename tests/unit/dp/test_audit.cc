// The one-run audit's bound (dp/audit.h): closed forms, values from an independent reference,
// monotonicity, edge cases and bad arguments.
//
// The reference values were computed by a separate Python implementation of the paper's Appendix D
// algorithm (binomial terms from lgamma, the same bisection to 60 halvings), not by this code.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "dp/audit.h"
#include "runtime/core/error.h"
#include "tests/unit/dp/errors.h"

namespace dp = dpg::dp;

namespace {

using dpg::testing::contains;
using dpg::testing::error_message;

// With delta 0 and every guess right, the p-value is p_eps^r, so the bound solves
// p_eps^r = 1 - confidence: eps = log(p / (1 - p)) with p = (1 - confidence)^(1/r).
double all_correct_closed_form(long long r, double confidence) {
  const double p = std::pow(1.0 - confidence, 1.0 / static_cast<double>(r));
  return std::log(p / (1.0 - p));
}

}  // namespace

TEST_CASE("all guesses right, delta 0: the closed form") {
  for (long long r : {1LL, 3LL, 10LL, 100LL, 1000LL}) {
    for (double conf : {0.9, 0.95, 0.99}) {
      const double want = all_correct_closed_form(r, conf);
      const double got = dp::audit_epsilon_lower_bound(r, r, r, 0.0, conf);
      CAPTURE(r);
      CAPTURE(conf);
      if (want <= 0) {
        CHECK(got == 0.0);  // one guess cannot reject epsilon 0 at 95%
      } else {
        CHECK(got <= want);
        CHECK(got == doctest::Approx(want).epsilon(1e-8));
      }
    }
  }
  // p-values at the closed form's epsilon: exactly 1 - confidence.
  CHECK(dp::audit_p_value(10, 10, 10, all_correct_closed_form(10, 0.95), 0.0) ==
        doctest::Approx(0.05).epsilon(1e-12));
}

TEST_CASE("values of the independent reference") {
  struct Case {
    long long m, r, v;
    double delta, want;
  };
  const std::vector<Case> cases = {
      {10, 10, 10, 0.0, 1.0518732332317082},
      {100, 100, 100, 0.0, 3.4929654311522937},
      {1000, 100, 100, 1e-5, 3.4653763478110453},
      {1000, 200, 200, 1e-5, 4.16649017670451},
      {1000, 100, 90, 1e-5, 1.6261434806957331},
      {1000, 1000, 700, 1e-5, 0.7317404494187011},
      {1000, 100, 60, 0.0, 0.05191493779919607},
      {1000, 200, 150, 1e-5, 0.8199729121700011},
  };
  for (const Case& c : cases) {
    CAPTURE(c.m);
    CAPTURE(c.r);
    CAPTURE(c.v);
    CHECK(dp::audit_epsilon_lower_bound(c.m, c.r, c.v, c.delta) ==
          doctest::Approx(c.want).epsilon(1e-7));
  }
  // p-values at epsilon 1, same reference.
  CHECK(dp::audit_p_value(1000, 100, 90, 1.0, 1e-5) ==
        doctest::Approx(0.0008412885614385114).epsilon(1e-9));
  CHECK(dp::audit_p_value(1000, 200, 150, 1.0, 1e-5) ==
        doctest::Approx(0.3044225124349786).epsilon(1e-9));
  CHECK(dp::audit_p_value(1000, 1000, 700, 1.0, 1e-5) ==
        doctest::Approx(0.9871627357451452).epsilon(1e-9));
}

TEST_CASE("monotone: more correct guesses, less delta, less confidence give larger bounds") {
  double last = 0;
  for (long long v = 0; v <= 200; ++v) {
    const double b = dp::audit_epsilon_lower_bound(1000, 200, v, 1e-5);
    CHECK(b >= last);
    last = b;
  }
  CHECK(last == doctest::Approx(4.16649017670451).epsilon(1e-7));
  // Chance level (half right, or less) rejects nothing.
  for (long long v = 0; v <= 100; ++v) CHECK(dp::audit_epsilon_lower_bound(1000, 200, v, 1e-5) == 0);
  double prev = std::numeric_limits<double>::infinity();
  for (double delta : {0.0, 1e-8, 1e-6, 1e-5, 1e-4, 1e-3}) {
    const double b = dp::audit_epsilon_lower_bound(1000, 100, 95, delta);
    CHECK(b <= prev);
    prev = b;
  }
  CHECK(dp::audit_epsilon_lower_bound(1000, 100, 95, 1e-5, 0.99) <
        dp::audit_epsilon_lower_bound(1000, 100, 95, 1e-5, 0.95));
  // The same accuracy over more guesses is stronger evidence.
  CHECK(dp::audit_epsilon_lower_bound(1000, 500, 450, 1e-5) >
        dp::audit_epsilon_lower_bound(1000, 100, 90, 1e-5));
  // The delta correction grows with the number of canaries (2 m delta).
  CHECK(dp::audit_epsilon_lower_bound(100000, 100, 100, 1e-5) <
        dp::audit_epsilon_lower_bound(100, 100, 100, 1e-5));
  // p-value is increasing in epsilon here.
  double p = 0;
  for (double eps = 0; eps <= 8; eps += 0.25) {
    const double now = dp::audit_p_value(1000, 100, 90, eps, 1e-5);
    CHECK(now >= p);
    p = now;
  }
  CHECK(dp::audit_p_value(1000, 100, 90, std::numeric_limits<double>::infinity(), 1e-5) == 1.0);
}

TEST_CASE("edge cases") {
  // No guesses: nothing rejected, p-value 1.
  CHECK(dp::audit_epsilon_lower_bound(1000, 0, 0, 1e-5) == 0);
  CHECK(dp::audit_p_value(1000, 0, 0, 0.0, 1e-5) == 1.0);
  CHECK(dp::audit_p_value(1000, 10, 0, 2.0, 1e-5) == 1.0);
  // One canary, one right guess: never significant at 95%.
  CHECK(dp::audit_epsilon_lower_bound(1, 1, 1, 0.0) == 0);
  // A delta large enough that 2 m delta alpha alone reaches the target rejects nothing.
  CHECK(dp::audit_epsilon_lower_bound(1000, 100, 100, 1e-2) <
        dp::audit_epsilon_lower_bound(1000, 100, 100, 0.0));
  CHECK(dp::audit_epsilon_lower_bound(1000, 100, 80, 0.5) == 0);
  // Large counts stay finite and fast.
  const double big = dp::audit_epsilon_lower_bound(100000, 100000, 100000, 1e-5);
  CHECK(big == doctest::Approx(8.127690262016005).epsilon(1e-7));  // the reference's
}

TEST_CASE("guesses: top k+ in, bottom k- out, abstain between") {
  const std::vector<double> scores = {0.9, 0.1, 0.5, 0.8, 0.2, 0.3};
  const std::vector<std::uint8_t> in = {1, 0, 1, 0, 0, 1};
  // Top 2: indices 0 (in, right) and 3 (out, wrong); bottom 2: 1 (out, right), 4 (out, right).
  auto g = dp::audit_guess(scores, in, 2, 2);
  CHECK(g.guesses == 4);
  CHECK(g.correct == 3);
  g = dp::audit_guess(scores, in, 0, 0);
  CHECK(g.guesses == 0);
  CHECK(g.correct == 0);
  g = dp::audit_guess(scores, in, 6, 0);  // all "in": right on the included ones
  CHECK(g.correct == 3);
  g = dp::audit_guess(scores, in, 0, 6);
  CHECK(g.correct == 3);
  // Ties keep index order: all equal, top 1 is index 0.
  const std::vector<double> flat(6, 0.0);
  CHECK(dp::audit_guess(flat, in, 1, 0).correct == 1);
  CHECK(dp::audit_guess(flat, in, 0, 1).correct == 0);  // index 5, included
}

TEST_CASE("bad arguments are named") {
  CHECK(contains(error_message([] { dp::audit_epsilon_lower_bound(0, 0, 0, 1e-5); }),
                 "canaries"));
  CHECK(contains(error_message([] { dp::audit_epsilon_lower_bound(10, 11, 0, 1e-5); }),
                 "guesses"));
  CHECK(contains(error_message([] { dp::audit_epsilon_lower_bound(10, -1, 0, 1e-5); }),
                 "guesses"));
  CHECK(contains(error_message([] { dp::audit_epsilon_lower_bound(10, 5, 6, 1e-5); }),
                 "correct"));
  CHECK(contains(error_message([] { dp::audit_epsilon_lower_bound(10, 5, -1, 1e-5); }),
                 "correct"));
  CHECK(contains(error_message([] { dp::audit_epsilon_lower_bound(10, 5, 5, 1.0); }), "delta"));
  CHECK(contains(error_message([] { dp::audit_epsilon_lower_bound(10, 5, 5, -1e-5); }), "delta"));
  CHECK(contains(error_message([] { dp::audit_epsilon_lower_bound(10, 5, 5, NAN); }), "delta"));
  CHECK(contains(error_message([] { dp::audit_epsilon_lower_bound(10, 5, 5, 1e-5, 1.0); }),
                 "confidence"));
  CHECK(contains(error_message([] { dp::audit_epsilon_lower_bound(10, 5, 5, 1e-5, 0.0); }),
                 "confidence"));
  CHECK(contains(error_message([] { dp::audit_p_value(10, 5, 5, -1.0, 1e-5); }), "epsilon"));
  CHECK(contains(error_message([] { dp::audit_p_value(10, 5, 5, NAN, 1e-5); }), "epsilon"));
  CHECK(contains(error_message([] { dp::audit_p_value(10, 5, 5, 1.0, 2.0); }), "delta"));
  const std::vector<double> s = {1, 2, 3};
  const std::vector<std::uint8_t> in = {1, 0, 1};
  const std::vector<std::uint8_t> short_in = {1, 0};
  CHECK(contains(error_message([&] { dp::audit_guess(s, short_in, 1, 1); }), "included"));
  CHECK(contains(error_message([&] { dp::audit_guess(s, in, -1, 1); }), "k_plus"));
  CHECK(contains(error_message([&] { dp::audit_guess(s, in, 1, -1); }), "k_minus"));
  CHECK(contains(error_message([&] { dp::audit_guess(s, in, 2, 2); }), "k_plus + k_minus"));
  const std::vector<double> nan_s = {1, NAN, 3};
  CHECK(contains(error_message([&] { dp::audit_guess(nan_s, in, 1, 1); }), "scores[1]"));
}
