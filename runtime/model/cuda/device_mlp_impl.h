// The one source of the device MLP (runtime/model/device_mlp.h), included by exactly one translation unit per
// backend, which defines first:
//   DPG_DEVICE_CUDA (nvcc: cuBLAS, Thrust's CUDA backend, cuRAND's device generator), or
//   DPG_DEVICE_HOST (the host compiler with THRUST_DEVICE_SYSTEM=CPP: the CPU sgemm, Thrust's C++
//                    backend, cuRAND's host generator);
//   DPG_DEVICE_NS, the namespace of that instance (two instances never meet in one binary, but
//                  their names stay apart anyway).
// Everything element-wise or reduced is a Thrust algorithm over an index range with a named
// functor (device_kernels.h), so both backends run the same arithmetic; only the memory calls
// (device_memory.h), the matrix products and the generator's constructor (Impl below) differ.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <math.h>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <curand.h>
#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system_error.h>
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

// Memory, errors and staging (the backend's calls), then the functors both backends share.
#include "runtime/model/cuda/device_memory.h"
#include "runtime/model/cuda/device_kernels.h"

namespace dpg::model::DPG_DEVICE_NS {

using std::size_t;

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
    // The stream-ordered allocations (Buffer's, Thrust's per-step temporaries) keep what is freed
    // for reuse rather than hand it back to the driver at every synchronization.
    if (cudaMemPool_t pool = nullptr; cudaDeviceGetDefaultMemPool(&pool, device_) == cudaSuccess) {
      std::uint64_t keep = UINT64_MAX;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    cudaGetLastError();  // a device without memory pools: Buffer falls back to cudaMalloc
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
    ghost_indicators();
  }

  ~Impl() override {
#if defined(DPG_DEVICE_CUDA)
    cudaSetDevice(device_);  // the handles and buffers belong to this device's context
#endif
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
    // Each row's squared norm, once: the first layer's share of every step's ghost norms.
    x2_.resize(std::max<size_t>(rows_, 1));
    reserve(std::min<size_t>(rows_, 1024));
    for (size_t start = 0; start < rows_; start += capacity_) {
      const size_t n = std::min(capacity_, rows_ - start);
      in_passes({{x_.data() + start * inputs, inputs}}, n, [&](const Parts& one, size_t) {
        sums_of_squares(one, ones_.data(), x2_.data() + start);  // one part's indicator: ones
      });
    }
    sync();
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
    // Virtual batches: at most physical_batch rows in the buffers at a time, their clipped sums
    // added up in grad_ before the one noise.
    const size_t per = dp.physical_batch == 0 ? std::max<size_t>(b, 1) : dp.physical_batch;
    reserve(std::min(b, per));
    DeviceStepStats stats;
    stats.batch = b;
    // The noise first: it depends on the step's key alone, not on the batch.
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
    grad_.zero();
    for (size_t first = 0; first < b; first += per) {
      const size_t n = std::min(per, b - first);
      add_clipped(batch.subspan(first, n), dp, stats);
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
      const Counts c = thrust_call("the evaluation's counters", [&] {
        return thrust::transform_reduce(
            policy(), thrust::counting_iterator<size_t>(0), thrust::counting_iterator<size_t>(n),
            CountOf{loss_.data(), correct_.data(), nullptr}, Counts{}, AddCounts{});
      });
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
  // One physical batch (rows of the resident set): forward, backward, under DP the per-example
  // norms and clipping, then its clipped sum added to grad_ and its counts to `stats`.
  void add_clipped(std::span<const std::uint32_t> rows, const DeviceDpOptions& dp,
                   DeviceStepStats& stats) {
    const size_t b = rows.size();
    idx_.from_host(rows);
    for_n(b * widths_[0], Gather{x_.data(), y_.data(), x2_.data(), idx_.data(), act_[0].data(),
                                 labels_.data(), a2_.data(), static_cast<size_t>(widths_[0])});
    forward(b);
    loss(b, true);
    backward(b);
    if (dp.enabled) {
      ghost_norms(b);
      for_n(b, ClipFactor{norms_.data(), a2_.data(), b, layers(), scale_.data(), dp.clip_norm});
      clip_rows(b);
    }
    for (int l = 0; l < layers(); ++l) {
      const size_t in = width(l), out = width(l + 1);
      // dW (out, in) += grad^T (out, b) act (b, in); db (1, out) += ones (1, b) grad (b, out)
      gemm(true, false, static_cast<int>(out), static_cast<int>(in), static_cast<int>(b), 1.0f,
           grad_of_[l].data(), static_cast<int>(out), act_[l].data(), static_cast<int>(in),
           1.0f, grad_.data() + offsets_[l], static_cast<int>(in));
      gemm(false, false, 1, static_cast<int>(out), static_cast<int>(b), 1.0f, ones_.data(),
           static_cast<int>(b), grad_of_[l].data(), static_cast<int>(out), 1.0f,
           grad_.data() + bias_offset(l), static_cast<int>(out));
    }
    // The piece's counters: a wait for the device, once every kernel of the piece is queued.
    const Counts c = thrust_call("the step's counters", [&] {
      return thrust::transform_reduce(
          policy(), thrust::counting_iterator<size_t>(0), thrust::counting_iterator<size_t>(b),
          CountOf{loss_.data(), correct_.data(), dp.enabled ? scale_.data() : nullptr}, Counts{},
          AddCounts{});
    });
    stats.loss_sum += c.loss;
    stats.correct += c.correct;
    stats.dropped += c.dropped;
    stats.clipped += c.clipped;
  }

  void reserve(size_t n) {
    if (n <= capacity_ && !act_.empty()) return;
    capacity_ = std::max<size_t>(n + n / 8, 16);
    act_.resize(widths_.size());
    grad_of_.resize(widths_.size() - 1);
    for (size_t l = 0; l < widths_.size(); ++l) act_[l].resize(capacity_ * widths_[l]);
    for (size_t l = 0; l + 1 < widths_.size(); ++l) grad_of_[l].resize(capacity_ * widths_[l + 1]);
    for (auto* v : {&loss_, &scale_, &a2_}) v->resize(capacity_);
    norms_.resize(capacity_ * 2 * widths_.size());
    const size_t widest = *std::max_element(widths_.begin(), widths_.end());
    squares_.resize(capacity_ * std::max(widest, ghost_cols_));
    ones_.resize(std::max(capacity_, widest));  // a batch's ones (bias sums), a row's (norms)
    correct_.resize(capacity_);
    labels_.resize(capacity_);
    idx_.resize(capacity_);
    for_n(ones_.size(), Fill{ones_.data(), 1.0f});
  }

  // Row sums of squares of the parts at once: their squares side by side (one pass), then one
  // product with their indicator (count x their columns, row p one on part p's columns), which
  // writes part p's sums at out + p * rows. A product reads memory in order, with a thread per
  // element, where a loop per row would leave a GPU a thread per example; one product for all the
  // parts is one launch where a product per part was one each.
  void sums_of_squares(const Parts& parts, const float* indicator, float* out) {
    const size_t width = parts.width();
    for_n(parts.rows * width, SquareBeside{parts, width, squares_.data()});
    gemm(false, true, parts.count, static_cast<int>(parts.rows), static_cast<int>(width), 1.0f,
         indicator, static_cast<int>(width), squares_.data(), static_cast<int>(width), 0.0f, out,
         static_cast<int>(parts.rows));
  }

  // The matrices whose row sums of squares the ghost norms take, with their columns: each layer's
  // output gradient, and each layer's input but the first's (the inputs' norms are computed once
  // per resident row, in upload_rows). norms_ holds their sums in this order (ClipFactor's
  // layout).
  std::vector<std::pair<float*, size_t>> ghost_matrices() {
    std::vector<std::pair<float*, size_t>> mats;
    for (int l = 0; l < layers(); ++l) {
      if (l > 0) mats.emplace_back(act_.empty() ? nullptr : act_[l].data(), width(l));
      mats.emplace_back(grad_of_.empty() ? nullptr : grad_of_[l].data(), width(l + 1));
    }
    return mats;
  }
  // Each run's indicator (in_passes's runs of the ghost matrices), once: they depend on the
  // widths alone.
  void ghost_indicators() {
    std::vector<float> host;
    in_passes(ghost_matrices(), 0, [&](const Parts& parts, size_t) {
      const size_t width = parts.width();
      ghost_cols_ = std::max(ghost_cols_, width);
      indicator_at_.push_back(host.size());
      host.resize(host.size() + parts.count * width, 0.0f);
      size_t column = 0;  // where part p's columns start
      for (int p = 0; p < parts.count; ++p) {
        std::fill_n(host.begin() + indicator_at_.back() + p * width + column, parts.cols[p], 1.0f);
        column += parts.cols[p];
      }
    });
    indicators_.resize(host.size());
    indicators_.from_host(host);
  }

  // Calls pass(parts, first) for each run of up to kMaxParts of the (matrix, columns) list, all
  // of `rows` rows; first is the index of the run's first matrix in the list.
  template <typename F>
  static void in_passes(const std::vector<std::pair<float*, size_t>>& mats, size_t rows, F pass) {
    for (size_t first = 0; first < mats.size(); first += kMaxParts) {
      Parts parts;
      parts.rows = rows;
      for (size_t m = first; m < std::min(mats.size(), first + kMaxParts); ++m) {
        parts.x[parts.count] = mats[m].first;
        parts.cols[parts.count++] = mats[m].second;
      }
      pass(parts, first);
    }
  }

  // norms_ (ClipFactor's layout): the ghost matrices' row sums of squares, a product per run of
  // up to kMaxParts matrices.
  void ghost_norms(size_t b) {
    size_t run = 0;
    in_passes(ghost_matrices(), b, [&](const Parts& parts, size_t first) {
      sums_of_squares(parts, indicators_.data() + indicator_at_[run++], norms_.data() + first * b);
    });
  }

  // Every layer's output gradient rows scaled by the clip factors (a pass per kMaxParts
  // matrices), and a dropped example's input rows zeroed (a thread per example).
  void clip_rows(size_t b) {
    std::vector<std::pair<float*, size_t>> grads, inputs;
    for (int l = 0; l < layers(); ++l) {
      grads.emplace_back(grad_of_[l].data(), width(l + 1));
      inputs.emplace_back(act_[l].data(), width(l));
    }
    in_passes(grads, b, [&](const Parts& parts, size_t) {
      for_n(parts.size(), ScaleRows{parts, scale_.data()});
    });
    in_passes(inputs, b, [&](const Parts& parts, size_t) {
      for_n(b, ZeroDropped{parts, scale_.data()});
    });
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
  // Waits for the model's work, surfacing any error of a kernel launched before. Every kernel,
  // cuBLAS call and cuRAND draw of the model goes to the legacy default stream, so that stream is
  // all it waits for: not the whole device, where an NCCL exchange in flight on its own stream
  // (collective/nccl) may wait on a peer, and is bounded by the communicator's deadline instead.
  void sync() const {
#if defined(DPG_DEVICE_CUDA)
    check(cudaStreamSynchronize(cudaStreamLegacy), "a kernel of the step");
#endif
  }

  MlpSpec spec_;
  std::vector<int> widths_;
  std::vector<size_t> offsets_;
  size_t num_params_ = 0;
  size_t ghost_cols_ = 0;  // the most columns the ghost norms square side by side, per example
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
  Buffer<float> x2_;  // each resident row's squared norm
  size_t rows_ = 0;

  size_t capacity_ = 0;
  std::vector<Buffer<float>> act_, grad_of_;
  Buffer<float> loss_, scale_, ones_, squares_;
  Buffer<float> a2_;     // the batch's inputs' squared norms (from x2_)
  Buffer<float> norms_;  // the ghost norms' row sums of squares (ClipFactor's layout)
  Buffer<float> indicators_;          // the ghost norms' runs' indicators, one after another
  std::vector<size_t> indicator_at_;  // where each run's indicator starts
  Buffer<std::uint8_t> correct_;
  Buffer<std::int32_t> labels_;
  Buffer<std::uint32_t> idx_;

  Staging staging_;                        // to and from the host, through pinned buffers
  std::vector<Buffer<float>> neighbours_;  // gossip's received models
  Buffer<const float*> mix_in_;
  Buffer<float> mix_w_;
};

}  // namespace dpg::model::DPG_DEVICE_NS
