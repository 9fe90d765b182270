// Emulated slow peers (--slowdown): a peer whose compute is FACTOR times slower, from the start
// or from an epoch or step on, and a peer that stalls for a while every K steps. The stretch is
// added where the work is: right after the step's gradient, this peer pauses (factor - 1) times
// what the gradient took (plus a due stall), holding no lock and no message (its transport's
// progress thread, where it has one, goes on moving the others' messages), so the peer takes
// longer per step as a slower machine would, and the others see it only through what it sends.
// docs/HETEROGENEITY.md.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace dpg::train {

struct Slowdown {
  int rank = 0;
  double factor = 1;    // compute time multiplier (>= 1)
  double at = 0;        // from this epoch (or step) on
  bool in_epochs = true;
  std::chrono::nanoseconds stall{0};  // stall entries: this long every `every` steps
  long long every = 0;
  bool operator==(const Slowdown&) const = default;
};

// One --slowdown flag: "2:4" (rank 2, 4x slower from the start), "2:4@epoch:5", "2:4@step:300",
// "3:stall=2s/100" (rank 3 stalls 2 s every 100 steps). Errors quote the flag.
Slowdown parse_slowdown(const std::string& flag);
std::string to_string(const Slowdown& s);  // the flag form
// Throws invalid_argument naming the entry when a rank is not below `world`.
void check_slowdown_ranks(const std::vector<Slowdown>& all, int world);

// One peer's slowdowns, with its epochs turned into steps (steps_per_epoch: 1 / q).
class Straggler {
 public:
  Straggler(const std::vector<Slowdown>& all, int rank, double steps_per_epoch);
  bool active() const { return !mine_.empty(); }
  // The factor in force at step t (the latest entry started by then; 1 before any).
  double factor_at(long long t) const;
  // What to add after step t's gradient, which took `worked`: (factor - 1) x worked, plus the
  // stall when t is a multiple of its period (t > 0).
  std::chrono::nanoseconds extra(long long t, std::chrono::nanoseconds worked) const;
  // Pauses for extra(t, worked).
  void stretch(long long t, std::chrono::nanoseconds worked) const;

 private:
  struct Entry {
    Slowdown s;
    long long from_step = 0;
  };
  std::vector<Entry> mine_;
};

}  // namespace dpg::train
