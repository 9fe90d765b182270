#include "runtime/model/blas_threads.h"

#include <cblas.h>

#include "runtime/core/error.h"

namespace dpg::model {

void set_blas_threads(int threads) {
  if (threads < 1) fail(Code::invalid_argument, "threads: must be at least 1");
  openblas_set_num_threads(threads);
}

int blas_threads() { return openblas_get_num_threads(); }

}  // namespace dpg::model
