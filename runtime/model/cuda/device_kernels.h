// The device MLP's element-wise and reduction work, one functor each, the same code on both
// backends, and for_n, which runs a functor over an index range.
// Included only by device_mlp_impl.h, after it has chosen the backend (DPG_DEVICE_CUDA or
// DPG_DEVICE_HOST) and included its headers.
#pragma once

#ifndef DPG_HD
#error "include runtime/model/cuda/device_mlp_impl.h, not this part of it"
#endif

namespace dpg::model::DPG_DEVICE_NS {

using std::size_t;

// ---------------------------------------------------------------------------------------------
// The element-wise and reduction work, one functor each (the same code on both backends).

struct Gather {  // the batch's rows, labels and inputs' squared norms from the resident ones
  const float* x;
  const std::int32_t* y;
  const float* x2;
  const std::uint32_t* rows;
  float* out;
  std::int32_t* labels;
  float* a2;
  size_t width;
  DPG_HD void operator()(size_t k) const {
    const size_t i = k / width;
    const size_t c = k % width;
    out[k] = x[static_cast<size_t>(rows[i]) * width + c];
    if (c == 0) {
      labels[i] = y[rows[i]];
      a2[i] = x2[rows[i]];
    }
  }
};

enum class Act : int { none, relu, tanh };

struct BiasActivation {  // z = act(z + bias)
  float* z;
  const float* bias;
  size_t cols;
  Act act;
  DPG_HD void operator()(size_t k) const {
    const float v = z[k] + bias[k % cols];
    z[k] = act == Act::relu ? (v > 0.0f ? v : 0.0f) : act == Act::tanh ? tanhf(v) : v;
  }
};

struct ActivationBackward {  // g *= act'(.) from the activation's output a
  float* g;
  const float* a;
  Act act;
  DPG_HD void operator()(size_t k) const {
    if (act == Act::relu) {
      g[k] = a[k] > 0.0f ? g[k] : 0.0f;
    } else {
      g[k] *= 1.0f - a[k] * a[k];
    }
  }
};

// Per row of logits: loss = logsumexp - logit[label], the first argmax against the label, and
// (grad not null) softmax - onehot, as kernels::softmax_xent does.
struct SoftmaxXent {
  const float* logits;
  const std::int32_t* labels;
  size_t classes;
  float* loss;
  std::uint8_t* correct;
  float* grad;
  DPG_HD void operator()(size_t r) const {
    const float* z = logits + r * classes;
    size_t best = 0;
    float zmax = z[0];
    for (size_t c = 1; c < classes; ++c) {
      if (z[c] > zmax) {
        zmax = z[c];
        best = c;
      }
    }
    float sum = 0.0f;
    for (size_t c = 0; c < classes; ++c) sum += expf(z[c] - zmax);
    const auto label = static_cast<size_t>(labels[r]);
    loss[r] = logf(sum) + zmax - z[label];
    correct[r] = best == label ? 1 : 0;
    if (grad != nullptr) {
      float* g = grad + r * classes;
      const float inv = 1.0f / sum;
      for (size_t c = 0; c < classes; ++c) g[c] = expf(z[c] - zmax) * inv;
      g[label] -= 1.0f;
    }
  }
};

// Up to kMaxParts row-major matrices of the same number of rows. A pass over all of them is one
// kernel launch where a pass per matrix would be one each: at the batch sizes a GPU trains with,
// the DP step's element-wise work is bound by launches as much as by memory.
//
// Each thread reads the struct's arrays at fixed indices only (the loops are unrolled): a GPU
// thread reads a kernel argument at a computed index far more slowly. Indexing x[p] and cols[p]
// with a computed p made these passes 6 to 7 times slower per element than the batch's gather
// on an H100 (docs/GPU.md).
constexpr int kMaxParts = 8;
struct Parts {
  float* x[kMaxParts] = {};
  size_t cols[kMaxParts] = {};
  int count = 0;
  size_t rows = 0;
  size_t size() const {
    size_t n = 0;
    for (int p = 0; p < count; ++p) n += rows * cols[p];
    return n;
  }
  size_t width() const {  // the columns of the parts side by side
    size_t n = 0;
    for (int p = 0; p < count; ++p) n += cols[p];
    return n;
  }
  struct At {
    float* x;     // the part's matrix
    size_t cols;  // its columns
    size_t j;     // the index within it
    int part;
  };
  // Index k of the parts one after another: part p's element j is k less the sizes of the parts
  // before it.
  DPG_HD At locate(size_t k) const { return walk(k, rows); }
  // Element (i, c) of the parts side by side: part p's columns after those of the parts before.
  DPG_HD At beside(size_t i, size_t c) const {
    At at = walk(c, 1);
    at.j += i * at.cols;
    return at;
  }

 private:
  // The part that k falls in when part p takes `per_col` * cols[p] places, and k's place in it.
  DPG_HD At walk(size_t k, size_t per_col) const {
    At at{x[0], cols[0], k, 0};
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int q = 1; q < kMaxParts; ++q) {
      const size_t n = per_col * at.cols;  // the size of part q - 1 while `at` is there
      if (q < count && at.part == q - 1 && at.j >= n) at = At{x[q], cols[q], at.j - n, q};
    }
    return at;
  }
};

// The squares of the parts side by side: out is (rows, in.width()) row-major, so that one product
// with the parts' indicator gives every part's row sums.
struct SquareBeside {
  Parts in;
  size_t width;  // in.width()
  float* out;
  DPG_HD void operator()(size_t k) const {
    const Parts::At at = in.beside(k / width, k % width);
    out[k] = at.x[at.j] * at.x[at.j];
  }
};

// Each example's squared gradient norm, summed over the layers as the CPU does
// (Mlp::per_example_sq_norms): |g_i|^2 (|a_i|^2 + 1) per layer, from the row sums of squares of
// the layer's output gradient and input. The first layer's inputs' come from a2_in (computed once
// per resident row), the others' from norms, which holds, b values each, the output gradient of
// layer 0, then the input and the output gradient of each further layer. Then dp::clip_factors's
// rule: min(1, C / (|g| + 1e-6)), 0 for a non-finite norm.
struct ClipFactor {
  const float* norms;
  const float* a2_in;
  size_t b;
  int layers;
  float* scale;
  float clip;
  DPG_HD void operator()(size_t i) const {
    float n2 = 0.0f;
    for (int l = 0; l < layers; ++l) {
      const float g2 = norms[2 * static_cast<size_t>(l) * b + i];
      const float a2 = l == 0 ? a2_in[i] : norms[(2 * static_cast<size_t>(l) - 1) * b + i];
      n2 += g2 * (a2 + 1.0f);
    }
    scale[i] = isfinite(n2) ? fminf(1.0f, clip / (sqrtf(n2) + 1e-6f)) : 0.0f;
  }
};

// Scales each example's rows of the output gradients (the parts) by its clip factor; a dropped
// example's rows become zeros (never 0 * inf in the sum).
struct ScaleRows {
  Parts grads;
  const float* scale;
  DPG_HD void operator()(size_t k) const {
    const Parts::At at = grads.locate(k);
    const float s = scale[at.j / at.cols];
    at.x[at.j] = s == 0.0f ? 0.0f : at.x[at.j] * s;
  }
};

// A dropped example's input rows (the parts) become zeros, so that its non-finite inputs never
// meet the zeros of its output gradients in the sum. A thread per example: dropped examples are
// rare, and every other thread reads one clip factor.
struct ZeroDropped {
  Parts inputs;
  const float* scale;
  DPG_HD void operator()(size_t i) const {
    if (scale[i] != 0.0f) return;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int q = 0; q < kMaxParts; ++q) {
      if (q >= inputs.count) break;
      float* row = inputs.x[q] + i * inputs.cols[q];
      for (size_t c = 0; c < inputs.cols[q]; ++c) row[c] = 0.0f;
    }
  }
};

struct Release {  // grad = (sum + noise) * inv; noise may be null
  float* grad;
  const float* noise;
  float inv;
  DPG_HD void operator()(size_t k) const {
    grad[k] = (noise != nullptr ? grad[k] + noise[k] : grad[k]) * inv;
  }
};

struct SgdUpdate {  // Sgd::apply, value by value
  float* p;
  float* v;
  const float* g;
  float lr, wd, mu, keep;
  bool nesterov;
  DPG_HD void operator()(size_t k) const {
    if (mu == 0.0f) {
      p[k] -= lr * (g[k] + wd * p[k]);
      return;
    }
    const float d = g[k] + wd * p[k];
    v[k] = keep * v[k] + d;
    p[k] -= lr * (nesterov ? d + mu * v[k] : v[k]);
  }
};

struct Fill {
  float* x;
  float value;
  DPG_HD void operator()(size_t k) const { x[k] = value; }
};

// The two below are written as the CPU's code is (collective::mix_range, ParamAverage::update),
// so that the host compiler gives the host instance the CPU's bits, fused multiply-adds
// included. nvcc may fuse differently: the CUDA instance agrees to rounding.
struct Mix {  // mix_range's order: the own value, then each neighbour's in turn
  float* p;
  const float* const* in;
  const float* w;
  size_t count;
  float self;
  DPG_HD void operator()(size_t i) const {
    float v = self * p[i];
    for (size_t k = 0; k < count; ++k) v += w[k] * in[k][i];
    p[i] = v;
  }
};

struct Average {  // ParamAverage::update, value by value
  float* avg;
  const float* p;
  float decay;
  DPG_HD void operator()(size_t i) const { avg[i] = decay * avg[i] + (1.0f - decay) * p[i]; }
};

// One step's counters, reduced on the device in one pass.
struct Counts {
  double loss = 0.0;
  unsigned long long correct = 0, dropped = 0, clipped = 0;
};
struct CountOf {
  const float* loss;
  const std::uint8_t* correct;
  const float* scale;  // null without DP
  DPG_HD Counts operator()(size_t i) const {
    Counts c;
    const float s = scale != nullptr ? scale[i] : 1.0f;
    c.loss = s != 0.0f ? static_cast<double>(loss[i]) : 0.0;
    c.correct = s != 0.0f ? correct[i] : 0;  // over the examples kept, as the loss
    c.dropped = s == 0.0f ? 1 : 0;
    c.clipped = (s < 1.0f && s > 0.0f) ? 1 : 0;
    return c;
  }
};
struct AddCounts {
  DPG_HD Counts operator()(const Counts& a, const Counts& b) const {
    Counts c;
    c.loss = a.loss + b.loss;
    c.correct = a.correct + b.correct;
    c.dropped = a.dropped + b.dropped;
    c.clipped = a.clipped + b.clipped;
    return c;
  }
};

template <typename F>
void for_n(size_t n, F f) {
  if (n == 0) return;
  thrust_call("a kernel over the model's arrays", [&] {
    thrust::for_each_n(policy(), thrust::counting_iterator<size_t>(0), n, f);
  });
}

}  // namespace dpg::model::DPG_DEVICE_NS
