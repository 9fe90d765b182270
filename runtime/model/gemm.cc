#include "runtime/model/gemm.h"

#include "runtime/model/blas_threads.h"

#if DPG_HAVE_DNNL
#include <dnnl.h>
#include <omp.h>

#include <string>

#include "runtime/core/error.h"
#else
#include <cblas.h>
#endif

namespace dpg::model {

#if DPG_HAVE_DNNL

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  // oneDNN's sgemm runs on OpenMP's threads of the calling thread, whose count is per thread:
  // follow the process-wide setting whichever thread calls.
  const int threads = blas_threads();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  const dnnl_status_t s = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a,
                                     lda, b, ldb, beta, c, ldc);
  if (s != dnnl_success) {
    fail(Code::internal, "sgemm: oneDNN failed with status " + std::to_string(static_cast<int>(s)));
  }
}

const char* gemm_library() { return "onednn"; }

#else

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const char* gemm_library() { return "openblas"; }

#endif

}  // namespace dpg::model
