// Element-wise kernels of the MLP, in a file of their own so the compiler may vectorise the
// transcendental functions (tanh, exp) through glibc's vector math library.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dpg::model::kernels {

// z (rows, cols) += bias (cols) per row, then the activation in place.
void bias_relu(float* z, const float* bias, std::size_t rows, std::size_t cols);
void bias_tanh(float* z, const float* bias, std::size_t rows, std::size_t cols);
void bias_only(float* z, const float* bias, std::size_t rows, std::size_t cols);

// g *= activation'(.) given the activation's output a.
void relu_backward(float* g, const float* a, std::size_t n);
void tanh_backward(float* g, const float* a, std::size_t n);

// The predicted class of one row of logits: the first largest (0 for a row of NaNs).
std::size_t argmax(const float* z, std::size_t classes);

// Per row of logits (rows, classes): loss = logsumexp - logit[label]; when grad is not null,
// grad = softmax - onehot(label). Returns the number of rows whose argmax() equals the label.
std::size_t softmax_xent(const float* logits, const std::int32_t* labels, std::size_t rows,
                         std::size_t classes, float* loss, float* grad);

// out[i] = sum_j x[i, j]^2 for x (rows, cols).
void row_sq_norms(const float* x, std::size_t rows, std::size_t cols, float* out);

}  // namespace dpg::model::kernels
