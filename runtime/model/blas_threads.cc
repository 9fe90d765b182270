#include "runtime/model/blas_threads.h"

#include <string>

#include "runtime/core/blas.h"
#include "runtime/core/error.h"

namespace dpg::model {

void set_blas_threads(int threads) {
  if (threads < 1) fail(Code::invalid_argument, "threads: must be at least 1");
  // One thread runs in oneDNN where the build has it (gemm.h), so OpenBLAS is opened here only
  // for more; for more, OpenBLAS caps the count at what it was built for (64 in Debian's build)
  // without a word, and a run or a benchmark row must not claim threads that never ran.
  if (threads > 1) openblas();
  const int got = set_openblas_threads(threads);
  if (got != threads) {
    fail(Code::invalid_argument, "threads: this OpenBLAS runs at most " + std::to_string(got) +
                                     " threads, got " + std::to_string(threads));
  }
}

int blas_threads() { return openblas_threads(); }

}  // namespace dpg::model
