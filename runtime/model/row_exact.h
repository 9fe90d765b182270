// The MLP's per-example arithmetic done row by row in a fixed order, for secure noise: every value
// of example i (its activations, output gradients, loss and norm) is computed from row i and the
// parameters alone, by a sequence of IEEE-754 operations that does not depend on how many rows
// the batch has, where row i sits in it, or what the other rows hold. So an example's clipped
// values, and its integers on the grid, are the same whether or not another example joins the
// batch: what secure noise's sensitivity assumes (dp/discrete_gaussian.h, docs/PRIVACY.md).
//
// Why the GEMM libraries do not give that: a BLAS picks its kernel, its blocking and its edge
// handling by the matrix's size and a row's place in it, and those change the order of the sums
// of a row's products (measured: with oneDNN and with OpenBLAS, adding one example to a batch
// moved other examples' grid values by one unit).
//
// How this file does: each product is one correctly rounded fused multiply-add (std::fma), in
// the order of the summed index from 0, whatever vector width carries it; the file is compiled
// without fast-math and without contraction (runtime/model/meson.build), so the compiler may
// vectorise across independent outputs but never reorder or fuse a row's own operations. The
// transcendental functions are glibc's scalar ones (expf, tanhf, logf), a function of their
// argument alone.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dpg::model::row_exact {

enum class Act { none, relu, tanh };

// c (rows, n) = a (rows, k) * b (k, n), all row-major: c[i][j] = fma(a[i][k-1], b[k-1][j], ...
// fma(a[i][0], b[0][j], 0)). With threads > 1 the rows are shared out in contiguous blocks, one
// thread each (blocks of fewer than 64 rows are not worth one): a row's values are the same.
void times(const float* a, std::size_t rows, std::size_t k, const float* b, std::size_t n,
           float* c, int threads = 1);

// out (cols, rows) = w (rows, cols) transposed.
void transpose(const float* w, std::size_t rows, std::size_t cols, float* out);

// z (rows, cols) += bias per row, then the activation in place.
void bias_act(float* z, const float* bias, std::size_t rows, std::size_t cols, Act act);

// g *= act'(.) given the activation's output a (n values).
void act_backward(float* g, const float* a, std::size_t n, Act act);

// kernels::softmax_xent's contract (runtime/model/kernels.h), row by row in a fixed order.
std::size_t softmax_xent(const float* logits, const std::int32_t* labels, std::size_t rows,
                         std::size_t classes, float* loss, float* grad);

// out[i] = sum_j x[i][j]^2, in sixteen fixed interleaved partial sums combined in a fixed tree.
void row_sq_norms(const float* x, std::size_t rows, std::size_t cols, float* out);

// out[i] += g2[i] * (a2[i] + 1): a layer's part of an example's squared gradient norm (mlp.h).
void add_layer_norms(float* out, const float* g2, const float* a2, std::size_t n);

}  // namespace dpg::model::row_exact
