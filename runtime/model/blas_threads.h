// How many threads the BLAS kernels use: the one process-wide setting of the model room.
#pragma once

namespace dpg::model {

void set_blas_threads(int threads);
int blas_threads();

}  // namespace dpg::model
