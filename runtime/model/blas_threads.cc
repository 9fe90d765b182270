#include "runtime/model/blas_threads.h"

#include <cblas.h>

#include <atomic>
#include <string>

#include "runtime/core/error.h"

namespace dpg::model {
namespace {
std::atomic<int> g_threads{0};  // 0: not set, the libraries' defaults
}  // namespace

void set_blas_threads(int threads) {
  if (threads < 1) fail(Code::invalid_argument, "threads: must be at least 1");
  openblas_set_num_threads(threads);
  // OpenBLAS caps the count at what it was built for (64 in Debian's build) without a word; a
  // run or a benchmark row must not claim threads that never ran.
  const int got = openblas_get_num_threads();
  if (got != threads) {
    fail(Code::invalid_argument, "threads: this OpenBLAS runs at most " + std::to_string(got) +
                                     " threads, got " + std::to_string(threads));
  }
  g_threads = threads;
}

int blas_threads() {
  const int t = g_threads;
  return t > 0 ? t : openblas_get_num_threads();
}

}  // namespace dpg::model
