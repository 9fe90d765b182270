// The model's one matrix product: row-major single-precision GEMM. On one thread it runs in
// oneDNN's sgemm when the build has it (faster than OpenBLAS on this model's shapes); on more it
// runs in OpenBLAS, whose thread pool degrades gracefully on a busy machine where oneDNN's OpenMP
// barriers stall a step for milliseconds each (docs/BENCHMARKS.md, "Training step").
#pragma once

namespace dpg::model {

// c (m, n) = alpha * op(a) * op(b) + beta * c, all row-major; op(x) is x or x^T. With beta == 0
// the old contents of c are not read.
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);

// The library sgemm runs in with `threads` BLAS threads: "onednn" or "openblas".
const char* gemm_library(int threads);

}  // namespace dpg::model
