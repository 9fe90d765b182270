#include "runtime/model/gemm.h"

#include "runtime/core/blas.h"
#include "runtime/model/blas_threads.h"

#if DPG_HAVE_DNNL
#include <dnnl.h>
#include <omp.h>

#include <string>

#include "runtime/core/dynlib.h"
#include "runtime/core/error.h"
#endif

namespace dpg::model {

#if DPG_HAVE_DNNL
namespace {

// oneDNN is loaded at the first GEMM, not linked (runtime/core/dynlib.h): a process that trains
// nothing (the launcher, a benchmark of the collectives, `privacy`) then never maps it, and
// oneDNN's 36,000 relocations were the largest part of every dpgossip process's start-up.
using SgemmFn = decltype(&dnnl_sgemm);
constexpr const char* kDnnl = "libdnnl.so.2";

SgemmFn dnnl_sgemm_fn() {
  static const SgemmFn fn =
      library_function<SgemmFn>(open_library(kDnnl, "libdnnl2"), kDnnl, "dnnl_sgemm");
  return fn;
}

}  // namespace
#endif

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
#if DPG_HAVE_DNNL
  if (blas_threads() == 1) {
    // oneDNN's sgemm runs on the OpenMP threads of the calling thread, whose count is per thread.
    if (omp_get_max_threads() != 1) omp_set_num_threads(1);
    const dnnl_status_t s = dnnl_sgemm_fn()(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha,
                                       a, lda, b, ldb, beta, c, ldc);
    if (s != dnnl_success) {
      fail(Code::internal, "sgemm: oneDNN failed with status " + std::to_string(static_cast<int>(s)));
    }
    return;
  }
#endif
  openblas().sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                   trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const char* gemm_library(int threads) {
  return DPG_HAVE_DNNL && threads == 1 ? "onednn" : "openblas";
}

}  // namespace dpg::model
