// How many threads the BLAS kernels use: the one process-wide setting of the model room, for
// OpenBLAS and, on one thread where the build has it, oneDNN's sgemm (runtime/model/gemm.h).
#pragma once

namespace dpg::model {

void set_blas_threads(int threads);
int blas_threads();

}  // namespace dpg::model
