// The one source of the device MLP (runtime/model/device_mlp.h), included by exactly one translation unit per
// backend, which defines first:
//   DPG_DEVICE_CUDA (nvcc: cuBLAS, Thrust's CUDA backend, cuRAND's device generator), or
//   DPG_DEVICE_HOST (the host compiler with THRUST_DEVICE_SYSTEM=CPP: the CPU sgemm, Thrust's C++
//                    backend, cuRAND's host generator);
//   DPG_DEVICE_NS, the namespace of that instance (two instances never meet in one binary, but
//                  their names stay apart anyway).
// Everything element-wise or reduced is a Thrust algorithm over an index range with a named
// functor, so both backends run the same arithmetic; only the matrix products, the memory calls
// and the generator's constructor differ, in the few functions under "Backend" below.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <math.h>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <curand.h>
#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform_reduce.h>

#include "runtime/core/check.h"
#include "runtime/core/error.h"
#include "runtime/model/device_mlp.h"

#if defined(DPG_DEVICE_CUDA)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <thrust/system/cuda/execution_policy.h>
#define DPG_HD __host__ __device__
#elif defined(DPG_DEVICE_HOST)
#include <thrust/system/cpp/execution_policy.h>

#include "runtime/model/gemm.h"
#define DPG_HD
#else
#error "define DPG_DEVICE_CUDA or DPG_DEVICE_HOST before including device_mlp_impl.h"
#endif

namespace dpg::model::DPG_DEVICE_NS {

using std::size_t;

// ---------------------------------------------------------------------------------------------
// Backend: memory, errors, the matrix product, the generator.

#if defined(DPG_DEVICE_CUDA)
inline auto policy() { return thrust::cuda::par_nosync; }

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    fail(Code::unavailable, std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
  }
}
inline void check(cublasStatus_t e, const char* what) {
  if (e != CUBLAS_STATUS_SUCCESS) {
    fail(Code::unavailable, std::string("cuBLAS: ") + what + ": " + cublasGetStatusString(e));
  }
}
#else
inline auto policy() { return thrust::cpp::par; }
#endif

inline void check(curandStatus_t e, const char* what) {
  if (e != CURAND_STATUS_SUCCESS) {
    fail(Code::unavailable, std::string("cuRAND: ") + what + ": status " + std::to_string(e));
  }
}

// An array in device memory, or with `pinned` in host memory the copy engine reads and writes
// directly (page-locked with CUDA; plain memory in the host instance); resize() keeps nothing.
template <typename T, bool pinned = false>
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)),
        capacity_(std::exchange(o.capacity_, 0)) {}
  Buffer& operator=(Buffer&&) = delete;
  ~Buffer() { release(); }
  void resize(size_t n) {
    size_ = n;
    if (n <= capacity_) return;
    release();
#if defined(DPG_DEVICE_CUDA)
    void* p = nullptr;
    check(pinned ? cudaHostAlloc(&p, n * sizeof(T), cudaHostAllocDefault)
                 : cudaMalloc(&p, n * sizeof(T)),
          ((pinned ? "cudaHostAlloc of " : "cudaMalloc of ") + std::to_string(n * sizeof(T)) +
           " bytes").c_str());
    data_ = static_cast<T*>(p);
#else
    data_ = new T[n];
#endif
    capacity_ = n;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }

  void from_host(std::span<const T> src) {
    DPG_CHECK(src.size() <= size_);
    if (src.empty()) return;
#if defined(DPG_DEVICE_CUDA)
    check(cudaMemcpy(data_, src.data(), src.size_bytes(), cudaMemcpyHostToDevice), "copy to device");
#else
    std::memcpy(data_, src.data(), src.size_bytes());
#endif
  }
  void to_host(std::span<T> dst) const {
    DPG_CHECK(dst.size() <= size_);
    if (dst.empty()) return;
#if defined(DPG_DEVICE_CUDA)
    check(cudaMemcpy(dst.data(), data_, dst.size_bytes(), cudaMemcpyDeviceToHost), "copy to host");
#else
    std::memcpy(dst.data(), data_, dst.size_bytes());
#endif
  }
  void zero() {
    if (size_ == 0) return;
#if defined(DPG_DEVICE_CUDA)
    check(cudaMemsetAsync(data_, 0, size_ * sizeof(T)), "memset");
#else
    std::memset(data_, 0, size_ * sizeof(T));
#endif
  }

 private:
  void release() {
    if (data_ == nullptr) return;
#if defined(DPG_DEVICE_CUDA)
    if (pinned) {
      cudaFreeHost(data_);
    } else {
      cudaFree(data_);
    }
#else
    delete[] data_;
#endif
    data_ = nullptr;
    capacity_ = 0;
  }
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// The staging of device-resident arrays to and from the host: kSlots pinned buffers in a ring, the
// copies on a stream of their own, an event per slot marking when its copy is done. While the
// caller takes slot i, the copies of slots i+1.. run on the copy engine.
class Staging {
 public:
  static constexpr size_t kSlots = 4;

  Staging() = default;
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() {
#if defined(DPG_DEVICE_CUDA)
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    for (auto& e : events_) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
#endif
  }

  void out(const float* src, std::span<const std::pair<size_t, size_t>> ranges,
           const DeviceMlp::ReadyRange& ready) {
    size_t widest = 0;
    for (const auto& r : ranges) widest = std::max(widest, r.second);
    if (widest == 0) {  // nothing to copy: every range is empty
      for (const auto& r : ranges) ready(r.first, {});
      return;
    }
    drain();  // the slots may still be in use by an earlier copy that threw
    buffer_.resize(kSlots * widest);
    auto slot = [&](size_t i) { return buffer_.data() + (i % kSlots) * widest; };
    auto issue = [&](size_t i) {
      const auto [offset, count] = ranges[i];
#if defined(DPG_DEVICE_CUDA)
      check(cudaMemcpyAsync(slot(i), src + offset, count * sizeof(float), cudaMemcpyDeviceToHost,
                            stream_),
            "copy to the staging buffer");
      check(cudaEventRecord(events_[i % kSlots], stream_), "cudaEventRecord");
#else
      std::memcpy(slot(i), src + offset, count * sizeof(float));
#endif
    };
    for (size_t i = 0; i < std::min(kSlots, ranges.size()); ++i) issue(i);
    for (size_t i = 0; i < ranges.size(); ++i) {
#if defined(DPG_DEVICE_CUDA)
      check(cudaEventSynchronize(events_[i % kSlots]), "a copy to the staging buffer");
#endif
      ready(ranges[i].first, std::span<const float>(slot(i), ranges[i].second));
      if (i + kSlots < ranges.size()) issue(i + kSlots);
    }
  }

  void in(float* dst, std::span<const float> values) {
    if (values.empty()) return;
    const size_t chunk = std::min(kStagingChunk, values.size());
    drain();
    buffer_.resize(kSlots * chunk);
    const size_t chunks = (values.size() + chunk - 1) / chunk;
    for (size_t i = 0; i < chunks; ++i) {
      float* slot = buffer_.data() + (i % kSlots) * chunk;
      const size_t begin = i * chunk, count = std::min(chunk, values.size() - begin);
#if defined(DPG_DEVICE_CUDA)
      // The slot's previous copy must have left it before the host overwrites it.
      if (i >= kSlots) check(cudaEventSynchronize(events_[i % kSlots]), "a copy from the staging buffer");
#endif
      std::memcpy(slot, values.data() + begin, count * sizeof(float));
#if defined(DPG_DEVICE_CUDA)
      check(cudaMemcpyAsync(dst + begin, slot, count * sizeof(float), cudaMemcpyHostToDevice,
                            stream_),
            "copy from the staging buffer");
      check(cudaEventRecord(events_[i % kSlots], stream_), "cudaEventRecord");
#else
      std::memcpy(dst + begin, slot, count * sizeof(float));
#endif
    }
    drain();
  }

 private:
  // Waits for every copy queued on the staging stream, creating it on first use (on the device
  // current then: the model's).
  void drain() {
#if defined(DPG_DEVICE_CUDA)
    if (stream_ == nullptr) {
      // A blocking stream: its copies wait for the work queued before them on the legacy stream
      // (the step's kernels), so what is copied is what the step wrote.
      check(cudaStreamCreate(&stream_), "cudaStreamCreate (staging copies)");
      for (auto& e : events_) {
        check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
      }
    }
    check(cudaStreamSynchronize(stream_), "the staging copies");
#endif
  }
  Buffer<float, true> buffer_;
#if defined(DPG_DEVICE_CUDA)
  cudaStream_t stream_ = nullptr;
  cudaEvent_t events_[kSlots] = {};
#endif
};

// ---------------------------------------------------------------------------------------------
// The element-wise and reduction work, one functor each (the same code on both backends).

struct Gather {  // the batch's rows and labels from the resident ones
  const float* x;
  const std::int32_t* y;
  const std::uint32_t* rows;
  float* out;
  std::int32_t* labels;
  size_t width;
  DPG_HD void operator()(size_t k) const {
    const size_t i = k / width;
    const size_t c = k % width;
    out[k] = x[static_cast<size_t>(rows[i]) * width + c];
    if (c == 0) labels[i] = y[rows[i]];
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

// sq[i] (+)= |g_i|^2 (|a_i|^2 + 1): one layer's share of example i's squared gradient norm.
struct Square {  // out = x * x, element by element
  const float* x;
  float* out;
  DPG_HD void operator()(size_t k) const { out[k] = x[k] * x[k]; }
};

// One layer's share of each example's squared gradient norm, |g_i|^2 (|a_i|^2 + 1), from the row
// sums of squares of its output gradient (g2) and input (a2), added to the earlier layers'.
struct GhostNorm {
  const float* a2;
  const float* g2;
  float* sq;
  bool first;
  DPG_HD void operator()(size_t i) const { sq[i] = (first ? 0.0f : sq[i]) + g2[i] * (a2[i] + 1.0f); }
};

// dp::clip_factors's rule: min(1, C / (|g| + 1e-6)), 0 for a non-finite norm.
struct ClipFactor {
  const float* sq;
  float* scale;
  float clip;
  DPG_HD void operator()(size_t i) const {
    const float n2 = sq[i];
    scale[i] = isfinite(n2) ? fminf(1.0f, clip / (sqrtf(n2) + 1e-6f)) : 0.0f;
  }
};

// Scales each example's output gradient by its clip factor; a dropped example's output gradient
// and input activation become zeros (never 0 * inf in the sum).
struct ClipRows {
  float* g;
  float* a;
  const float* scale;
  size_t in, out;
  DPG_HD void operator()(size_t k) const {
    const size_t width = in > out ? in : out;
    const size_t i = k / width;
    const size_t c = k % width;
    const float s = scale[i];
    if (c < out) g[i * out + c] = s == 0.0f ? 0.0f : g[i * out + c] * s;
    if (c < in && s == 0.0f) a[i * in + c] = 0.0f;
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
    c.correct = correct[i];
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
  if (n > 0) thrust::for_each_n(policy(), thrust::counting_iterator<size_t>(0), n, f);
}

// ---------------------------------------------------------------------------------------------

class Impl final : public DeviceMlp {
 public:
  Impl(const MlpSpec& spec, int device, std::span<const float> params)
      : spec_(spec), widths_(spec.widths()), device_(device) {
    if (spec_.inputs <= 0 || spec_.classes < 2) {
      fail(Code::invalid_argument, "device model: needs at least one input and two classes");
    }
    size_t total = 0;
    for (size_t l = 0; l + 1 < widths_.size(); ++l) {
      offsets_.push_back(total);
      total += static_cast<size_t>(widths_[l + 1]) * (widths_[l] + 1);
    }
    num_params_ = total;
    if (params.size() != total) {
      fail(Code::invalid_argument, "device model: " + std::to_string(params.size()) +
                                       " parameters given, the model has " +
                                       std::to_string(total));
    }
#if defined(DPG_DEVICE_CUDA)
    check(cudaSetDevice(device_), ("cudaSetDevice(" + std::to_string(device_) + ")").c_str());
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
    name_ = "cuda:" + std::to_string(device_) + " (" + prop.name + ")";
    check(cublasCreate(&blas_), "cublasCreate");
    check(curandCreateGenerator(&gen_, CURAND_RNG_PSEUDO_PHILOX4_32_10), "create Philox generator");
#else
    name_ = "host (Thrust C++ backend)";
    check(curandCreateGeneratorHost(&gen_, CURAND_RNG_PSEUDO_PHILOX4_32_10),
          "create host Philox generator");
#endif
    params_.resize(total);
    grad_.resize(total);
    grad_.zero();
    noise_.resize(total + (total % 2));  // cuRAND draws normals in pairs
    velocity_.resize(total);
    velocity_.zero();
    average_.resize(total);
    upload_params(params);
    average_.from_host(params);
  }

  ~Impl() override {
    if (gen_ != nullptr) curandDestroyGenerator(gen_);
#if defined(DPG_DEVICE_CUDA)
    if (blas_ != nullptr) cublasDestroy(blas_);
#endif
  }

  const MlpSpec& spec() const override { return spec_; }
  size_t num_params() const override { return num_params_; }
  std::string device_name() const override { return name_; }

  void upload_params(std::span<const float> params) override {
    select();
    DPG_CHECK_EQ(params.size(), num_params_);
    params_.from_host(params);
  }
  void download_params(std::span<float> params) const override {
    select();
    DPG_CHECK_EQ(params.size(), num_params_);
    params_.to_host(params);
  }

  void upload_rows(std::span<const float> x, std::span<const std::int32_t> labels) override {
    select();
    const auto inputs = static_cast<size_t>(spec_.inputs);
    if (x.size() != labels.size() * inputs) {
      fail(Code::invalid_argument, "device model: " + std::to_string(x.size()) +
                                       " feature values for " + std::to_string(labels.size()) +
                                       " rows of " + std::to_string(inputs));
    }
    check_labels(labels);
    x_.resize(x.size());
    y_.resize(labels.size());
    x_.from_host(x);
    y_.from_host(labels);
    rows_ = labels.size();
  }
  size_t resident_rows() const override { return rows_; }

  DeviceStepStats gradient(std::span<const std::uint32_t> batch, long long t,
                           const DeviceDpOptions& dp) override {
    select();
    const size_t b = batch.size();
    for (const std::uint32_t r : batch) {
      if (r >= rows_) {
        fail(Code::invalid_argument, "device model: batch row " + std::to_string(r) +
                                         " of " + std::to_string(rows_) + " resident rows");
      }
    }
    if (dp.expected_batch <= 0.0 || (dp.enabled && !(dp.clip_norm > 0.0f))) {
      fail(Code::invalid_argument, "device model: needs expected_batch > 0 and C > 0");
    }
    reserve(b);
    DeviceStepStats stats;
    stats.batch = b;
    grad_.zero();
    if (b > 0) {
      idx_.from_host(batch);
      for_n(b * widths_[0], Gather{x_.data(), y_.data(), idx_.data(), act_[0].data(),
                                   labels_.data(), static_cast<size_t>(widths_[0])});
      forward(b);
      loss(b, true);
      backward(b);
      const float* scale = nullptr;
      if (dp.enabled) {
        for (int l = 0; l < layers(); ++l) {
          row_squares(act_[l].data(), b, width(l), a2_.data());
          row_squares(grad_of_[l].data(), b, width(l + 1), g2_.data());
          for_n(b, GhostNorm{a2_.data(), g2_.data(), sq_.data(), l == 0});
        }
        for_n(b, ClipFactor{sq_.data(), scale_.data(), dp.clip_norm});
        scale = scale_.data();
      }
      const Counts c = thrust::transform_reduce(
          policy(), thrust::counting_iterator<size_t>(0), thrust::counting_iterator<size_t>(b),
          CountOf{loss_.data(), correct_.data(), scale}, Counts{}, AddCounts{});
      stats.loss_sum = c.loss;
      stats.correct = c.correct;
      stats.dropped = c.dropped;
      stats.clipped = c.clipped;
      for (int l = 0; l < layers(); ++l) {
        const size_t in = width(l), out = width(l + 1);
        if (scale != nullptr) {
          for_n(b * std::max(in, out),
                ClipRows{grad_of_[l].data(), act_[l].data(), scale, in, out});
        }
        // dW (out, in) += grad^T (out, b) act (b, in); db (1, out) += ones (1, b) grad (b, out)
        gemm(true, false, static_cast<int>(out), static_cast<int>(in), static_cast<int>(b), 1.0f,
             grad_of_[l].data(), static_cast<int>(out), act_[l].data(), static_cast<int>(in),
             1.0f, grad_.data() + offsets_[l], static_cast<int>(in));
        gemm(false, false, 1, static_cast<int>(out), static_cast<int>(b), 1.0f, ones_.data(),
             static_cast<int>(b), grad_of_[l].data(), static_cast<int>(out), 1.0f,
             grad_.data() + bias_offset(l), static_cast<int>(out));
      }
    }
    const float* noise = nullptr;
    const double sigma = dp.enabled ? dp.noise_multiplier : 0.0;
    if (sigma > 0.0) {
      check(curandSetPseudoRandomGeneratorSeed(gen_, device_noise_key(dp.seed, dp.rank, t)), "seed");
      check(curandSetGeneratorOffset(gen_, 0), "offset");
      check(curandGenerateNormal(gen_, noise_.data(), noise_.size(), 0.0f,
                                 static_cast<float>(sigma * dp.clip_norm)),
            "generate normals");
      noise = noise_.data();
    }
    for_n(num_params_,
          Release{grad_.data(), noise, static_cast<float>(1.0 / dp.expected_batch)});
    sync();
    return stats;
  }

  void download_gradient(std::span<float> out) const override {
    select();
    DPG_CHECK_EQ(out.size(), num_params_);
    grad_.to_host(out);
  }
  void upload_gradient(std::span<const float> gradient) override {
    select();
    DPG_CHECK_EQ(gradient.size(), num_params_);
    grad_.from_host(gradient);
  }

  void sgd_step(const DeviceSgdOptions& o) override {
    select();
    const auto mu = static_cast<float>(o.momentum);
    const float keep = started_ ? mu : 0.0f;  // PyTorch: the first step sets the buffer to g
    if (mu != 0.0f) started_ = true;
    for_n(num_params_, SgdUpdate{params_.data(), velocity_.data(), grad_.data(),
                                 static_cast<float>(o.lr), static_cast<float>(o.weight_decay), mu,
                                 keep, o.nesterov});
    sync();
  }
  void download_momentum(std::span<float> out) const override {
    select();
    DPG_CHECK_EQ(out.size(), num_params_);
    velocity_.to_host(out);
  }
  void restore_momentum(std::span<const float> velocity, bool started) override {
    select();
    DPG_CHECK_EQ(velocity.size(), num_params_);
    velocity_.from_host(velocity);
    started_ = started;
  }

  void average_step(float decay) override {
    select();
    for_n(num_params_, Average{average_.data(), params_.data(), decay});
    sync();
  }
  bool momentum_started() const override { return started_; }
  float* device_data(DeviceArray which) override {
    switch (which) {
      case DeviceArray::params: return params_.data();
      case DeviceArray::gradient: return grad_.data();
      case DeviceArray::average: return average_.data();
    }
    return nullptr;
  }
  void stream_out(DeviceArray which, std::span<const std::pair<size_t, size_t>> ranges,
                  const ReadyRange& ready) override {
    select();
    for (const auto& [offset, count] : ranges) check_range(offset, count);
    staging_.out(device_data(which), ranges, ready);
  }
  void stream_in(DeviceArray which, size_t offset, std::span<const float> values) override {
    select();
    check_range(offset, values.size());
    staging_.in(device_data(which) + offset, values);
  }
  std::vector<float*> neighbour_buffers(size_t count) override {
    select();
    while (neighbours_.size() < count) {
      neighbours_.emplace_back();
      neighbours_.back().resize(num_params_);
    }
    std::vector<float*> out;
    for (size_t k = 0; k < count; ++k) out.push_back(neighbours_[k].data());
    return out;
  }
  void mix_params(float self_weight, std::span<const float> weights) override {
    select();
    if (weights.size() > neighbours_.size()) {
      fail(Code::internal, "device model: " + std::to_string(weights.size()) +
                               " mixing weights for " + std::to_string(neighbours_.size()) +
                               " neighbour buffers");
    }
    std::vector<const float*> in;
    for (size_t k = 0; k < weights.size(); ++k) in.push_back(neighbours_[k].data());
    mix_in_.resize(std::max<size_t>(1, in.size()));
    mix_w_.resize(std::max<size_t>(1, weights.size()));
    mix_in_.from_host(in);
    mix_w_.from_host(weights);
    for_n(num_params_,
          Mix{params_.data(), mix_in_.data(), mix_w_.data(), weights.size(), self_weight});
    sync();
  }

  Mlp::Evaluation evaluate(std::span<const float> x,
                           std::span<const std::int32_t> labels) override {
    select();
    const auto inputs = static_cast<size_t>(spec_.inputs);
    DPG_CHECK_EQ(x.size(), labels.size() * inputs);
    check_labels(labels);
    constexpr size_t kChunk = 4096;
    Mlp::Evaluation ev;
    ev.rows = labels.size();
    for (size_t start = 0; start < labels.size(); start += kChunk) {
      const size_t n = std::min(kChunk, labels.size() - start);
      reserve(n);
      act_[0].from_host(x.subspan(start * inputs, n * inputs));
      labels_.from_host(labels.subspan(start, n));
      forward(n);
      loss(n, false);
      const Counts c = thrust::transform_reduce(
          policy(), thrust::counting_iterator<size_t>(0), thrust::counting_iterator<size_t>(n),
          CountOf{loss_.data(), correct_.data(), nullptr}, Counts{}, AddCounts{});
      ev.loss_sum += c.loss;
      ev.correct += c.correct;
    }
    return ev;
  }

 private:
  int layers() const { return static_cast<int>(widths_.size()) - 1; }
  size_t width(int l) const { return static_cast<size_t>(widths_[static_cast<size_t>(l)]); }
  size_t bias_offset(int l) const { return offsets_[l] + width(l + 1) * width(l); }
  Act activation() const { return spec_.activation == Activation::relu ? Act::relu : Act::tanh; }

  void check_range(size_t offset, size_t count) const {
    if (offset > num_params_ || count > num_params_ - offset) {
      fail(Code::internal, "device model: values [" + std::to_string(offset) + ", " +
                               std::to_string(offset + count) + ") of " +
                               std::to_string(num_params_));
    }
  }

  void check_labels(std::span<const std::int32_t> labels) const {
    for (size_t i = 0; i < labels.size(); ++i) {
      if (labels[i] < 0 || labels[i] >= spec_.classes) {
        fail(Code::invalid_argument, "device model: label " + std::to_string(labels[i]) +
                                         " of row " + std::to_string(i) + " is not a class in [0, " +
                                         std::to_string(spec_.classes) + ")");
      }
    }
  }

  // Per-batch buffers for n rows, grown with headroom so Poisson batch sizes rarely reallocate.
  void reserve(size_t n) {
    if (n <= capacity_ && !act_.empty()) return;
    capacity_ = std::max<size_t>(n + n / 8, 16);
    act_.resize(widths_.size());
    grad_of_.resize(widths_.size() - 1);
    for (size_t l = 0; l < widths_.size(); ++l) act_[l].resize(capacity_ * widths_[l]);
    for (size_t l = 0; l + 1 < widths_.size(); ++l) grad_of_[l].resize(capacity_ * widths_[l + 1]);
    for (auto* v : {&loss_, &sq_, &scale_, &a2_, &g2_}) v->resize(capacity_);
    const size_t widest = *std::max_element(widths_.begin(), widths_.end());
    squares_.resize(capacity_ * widest);
    ones_.resize(std::max(capacity_, widest));  // a batch's ones (bias sums), a row's (norms)
    correct_.resize(capacity_);
    labels_.resize(capacity_);
    idx_.resize(capacity_);
    for_n(ones_.size(), Fill{ones_.data(), 1.0f});
  }

  // out[i] = sum_c x[i][c]^2 over the rows of the (rows, cols) matrix x: the squares element by
  // element, then their row sums as a matrix-vector product. Both read memory in order, with a
  // thread per element, where a loop per row would leave a GPU a thread per example.
  void row_squares(const float* x, size_t rows, size_t cols, float* out) {
    for_n(rows * cols, Square{x, squares_.data()});
    gemm(false, false, static_cast<int>(rows), 1, static_cast<int>(cols), 1.0f, squares_.data(),
         static_cast<int>(cols), ones_.data(), 1, 0.0f, out, 1);
  }

  void forward(size_t b) {
    for (int l = 0; l < layers(); ++l) {
      const size_t in = width(l), out = width(l + 1);
      // z (b, out) = act (b, in) W^T (in, out)
      gemm(false, true, static_cast<int>(b), static_cast<int>(out), static_cast<int>(in), 1.0f,
           act_[l].data(), static_cast<int>(in), params_.data() + offsets_[l],
           static_cast<int>(in), 0.0f, act_[l + 1].data(), static_cast<int>(out));
      for_n(b * out, BiasActivation{act_[l + 1].data(), params_.data() + bias_offset(l), out,
                                    l + 1 == layers() ? Act::none : activation()});
    }
  }

  void loss(size_t b, bool backward) {
    for_n(b, SoftmaxXent{act_.back().data(), labels_.data(), width(layers()), loss_.data(),
                         correct_.data(), backward ? grad_of_.back().data() : nullptr});
  }

  void backward(size_t b) {
    for (int l = layers() - 1; l >= 1; --l) {
      const size_t in = width(l), out = width(l + 1);
      // grad[l-1] (b, in) = grad[l] (b, out) W_l (out, in), then times act'(.)
      gemm(false, false, static_cast<int>(b), static_cast<int>(in), static_cast<int>(out), 1.0f,
           grad_of_[l].data(), static_cast<int>(out), params_.data() + offsets_[l],
           static_cast<int>(in), 0.0f, grad_of_[l - 1].data(), static_cast<int>(in));
      for_n(b * in, ActivationBackward{grad_of_[l - 1].data(), act_[l].data(), activation()});
    }
  }

  // c (m, n) = alpha op(a) op(b) + beta c, all row-major (gemm.h's sgemm).
  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) {
    if (m == 0 || n == 0) return;
#if defined(DPG_DEVICE_CUDA)
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
    check(cublasSgemm(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
                      k, &alpha, b, ldb, a, lda, &beta, c, ldc),
          "sgemm");
#else
    sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
  }

  void select() const {
#if defined(DPG_DEVICE_CUDA)
    check(cudaSetDevice(device_), "cudaSetDevice");
#endif
  }
  // Waits for the device's work, surfacing any error of a kernel launched before.
  void sync() const {
#if defined(DPG_DEVICE_CUDA)
    check(cudaDeviceSynchronize(), "a kernel of the step");
#endif
  }

  MlpSpec spec_;
  std::vector<int> widths_;
  std::vector<size_t> offsets_;
  size_t num_params_ = 0;
  int device_ = 0;
  std::string name_;
#if defined(DPG_DEVICE_CUDA)
  cublasHandle_t blas_ = nullptr;
#endif
  curandGenerator_t gen_ = nullptr;

  Buffer<float> params_, grad_, noise_, velocity_, average_;
  bool started_ = false;
  Buffer<float> x_;
  Buffer<std::int32_t> y_;
  size_t rows_ = 0;

  size_t capacity_ = 0;
  std::vector<Buffer<float>> act_, grad_of_;
  Buffer<float> loss_, sq_, scale_, ones_, a2_, g2_, squares_;
  Buffer<std::uint8_t> correct_;
  Buffer<std::int32_t> labels_;
  Buffer<std::uint32_t> idx_;

  Staging staging_;                        // to and from the host, through pinned buffers
  std::vector<Buffer<float>> neighbours_;  // gossip's received models
  Buffer<const float*> mix_in_;
  Buffer<float> mix_w_;
};

}  // namespace dpg::model::DPG_DEVICE_NS
