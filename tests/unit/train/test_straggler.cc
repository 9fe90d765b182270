// Emulated slow peers (runtime/train/straggler.h): the flag's forms and errors, the schedule in
// steps, and the pause, checked from below (a sleep is never shorter than asked).
#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <string>

#include "runtime/core/error.h"
#include "runtime/train/straggler.h"

using namespace std::chrono_literals;
using dpg::train::parse_slowdown;
using dpg::train::Slowdown;
using dpg::train::Straggler;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const dpg::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a slowdown flag's forms") {
  CHECK(parse_slowdown("2:4") == Slowdown{.rank = 2, .factor = 4});
  CHECK(parse_slowdown("2:4@epoch:5") == Slowdown{.rank = 2, .factor = 4, .at = 5});
  CHECK(parse_slowdown("0:1.5@step:300") ==
        Slowdown{.rank = 0, .factor = 1.5, .at = 300, .in_epochs = false});
  const Slowdown stall = parse_slowdown("3:stall=2s/100");
  CHECK(stall.rank == 3);
  CHECK(stall.stall == 2s);
  CHECK(stall.every == 100);
  for (const char* f : {"2:4", "2:4@epoch:5", "0:1.5@step:300", "3:stall=2s/100"}) {
    CHECK(dpg::train::to_string(parse_slowdown(f)) == f);
  }
}

TEST_CASE("a bad slowdown flag is quoted") {
  auto bad = [](const char* f) { return error_of([&] { parse_slowdown(f); }); };
  CHECK(bad("4").find("--slowdown \"4\"") != std::string::npos);
  CHECK(bad("-1:4").find("rank that is not negative") != std::string::npos);
  CHECK(bad("1:0.5").find("[1, 1000]") != std::string::npos);
  CHECK(bad("1:fast").find("[1, 1000]") != std::string::npos);
  CHECK(bad("1:4@day:3").find("epoch:E or step:S") != std::string::npos);
  CHECK(bad("1:4@epoch:-1").find("not negative") != std::string::npos);
  CHECK(bad("1:stall=2s").find("stall=TIME/STEPS") != std::string::npos);
  CHECK(bad("1:stall=2parsecs/10").find("stall") != std::string::npos);
  CHECK(bad("1:stall=2s/0").find("at least 1") != std::string::npos);
  CHECK(bad("1:stall=0s/10").find("longer than 0") != std::string::npos);
  const std::string ranks = error_of([] {
    dpg::train::check_slowdown_ranks({parse_slowdown("4:2")}, 4);
  });
  CHECK(ranks.find("rank 4, but the run has 4 peers") != std::string::npos);
}

TEST_CASE("a peer's factors in steps, and its stalls") {
  // 10 steps per epoch: 2x from epoch 1 (step 10), 4x from step 25; a 1 ms stall every 7 steps.
  const std::vector<Slowdown> all = {parse_slowdown("1:4@step:25"), parse_slowdown("1:2@epoch:1"),
                                     parse_slowdown("1:stall=1ms/7"), parse_slowdown("0:8")};
  Straggler s(all, 1, 10.0);
  CHECK(s.active());
  CHECK(s.factor_at(0) == 1);
  CHECK(s.factor_at(9) == 1);
  CHECK(s.factor_at(10) == 2);
  CHECK(s.factor_at(24) == 2);
  CHECK(s.factor_at(25) == 4);
  CHECK(s.extra(3, 10ms) == 0ms);
  CHECK(s.extra(12, 10ms) == 10ms);
  CHECK(s.extra(14, 10ms) == 11ms);  // 2x and a stall at step 14
  CHECK(s.extra(0, 10ms) == 0ms);    // no stall before the first step's work
  CHECK(s.extra(30, 10ms) == 30ms);
  CHECK_FALSE(Straggler(all, 2, 10.0).active());
}

TEST_CASE("the pause is at least what the factor asks") {
  Straggler s({parse_slowdown("0:3")}, 0, 1.0);
  const auto t0 = std::chrono::steady_clock::now();
  s.stretch(1, 10ms);
  CHECK(std::chrono::steady_clock::now() - t0 >= 20ms);
}
