// Work cut into parts and run at once on threads started for it: the one way the CPU kernels
// that share a step's work among the BLAS threads (row-exact products, grid sums, the discrete
// Gaussian's ranges) start, fall back and join.
#pragma once

#include <cstddef>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

namespace dpg {

// Runs part(k) for every k in [0, parts): each but the last on a thread of its own, the last on
// the calling thread, and any part whose thread cannot start (std::system_error: no thread to
// be had) on the calling thread too. Returns once every part has ended, then rethrows the
// exception of the lowest part that threw, if any.
template <class F>
void run_parts(std::size_t parts, F&& part) {
  if (parts == 0) return;
  std::vector<std::exception_ptr> errors(parts);
  const auto guarded = [&](std::size_t k) {
    try {
      part(k);
    } catch (...) {
      errors[k] = std::current_exception();
    }
  };
  std::vector<std::thread> helpers;
  for (std::size_t k = 0; k + 1 < parts; ++k) {
    try {
      helpers.emplace_back(guarded, k);
    } catch (const std::system_error&) {
      guarded(k);
    }
  }
  guarded(parts - 1);
  for (auto& h : helpers) h.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace dpg
