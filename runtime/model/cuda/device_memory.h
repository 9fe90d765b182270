// The device MLP's memory and errors: Thrust's execution policy, the CUDA, cuBLAS and cuRAND
// error checks, device (or pinned host) arrays, and the staging of arrays to and from the host.
// Included only by device_mlp_impl.h, after it has chosen the backend (DPG_DEVICE_CUDA or
// DPG_DEVICE_HOST) and included its headers.
#pragma once

#ifndef DPG_HD
#error "include runtime/model/cuda/device_mlp_impl.h, not this part of it"
#endif

namespace dpg::model::DPG_DEVICE_NS {

using std::size_t;

// ---------------------------------------------------------------------------------------------
// Backend: the execution policy, errors, memory.

#if defined(DPG_DEVICE_CUDA)
inline constexpr bool kOnDevice = true;
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
inline constexpr bool kOnDevice = false;
inline auto policy() { return thrust::cpp::par; }
#endif

inline void check(curandStatus_t e, const char* what) {
  if (e != CURAND_STATUS_SUCCESS) {
    fail(Code::unavailable, std::string("cuRAND: ") + what + ": status " + std::to_string(e));
  }
}

// Runs a Thrust algorithm. Thrust reports a failed launch with thrust::system_error, and a failed
// allocation of its temporaries with a std::bad_alloc that main() would take for an input asking
// too much of the host: both become the backend's error, naming the work.
template <class F>
auto thrust_call(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const thrust::system_error& e) {
    fail(Code::unavailable, std::string("thrust: ") + what + ": " + e.what());
  } catch (const std::bad_alloc&) {
    fail(Code::unavailable, std::string("thrust: ") + what + ": out of " +
                                (kOnDevice ? "device" : "host") + " memory for its temporaries");
  }
}

// An array in device memory, or with `pinned` in host memory the copy engine reads and writes
// directly (page-locked with CUDA; plain memory in the host instance); resize() keeps nothing.
// Device memory is allocated and freed in the order of the legacy default stream, where the
// model's work runs (cudaMallocAsync, cudaFreeAsync): cudaMalloc and cudaFree may wait for the
// whole device, and a batch larger than any before regrows buffers in the middle of a step, while
// an NCCL exchange that waits on a peer may be running on its own stream (collective/nccl). A
// device without stream-ordered allocation gets cudaMalloc and cudaFree.
template <typename T, bool pinned = false>
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)),
        capacity_(std::exchange(o.capacity_, 0)), pooled_(o.pooled_) {}
  Buffer& operator=(Buffer&&) = delete;
  ~Buffer() { release(); }
  void resize(size_t n) {
    if (n <= capacity_) {
      size_ = n;
      return;
    }
    release();  // an allocation that fails below leaves the buffer empty
    size_ = 0;
#if defined(DPG_DEVICE_CUDA)
    void* p = nullptr;
    cudaError_t e = pinned ? cudaHostAlloc(&p, n * sizeof(T), cudaHostAllocDefault)
                           : cudaMallocAsync(&p, n * sizeof(T), cudaStreamLegacy);
    pooled_ = !pinned;
    if (e == cudaErrorNotSupported && !pinned) {
      cudaGetLastError();
      e = cudaMalloc(&p, n * sizeof(T));
      pooled_ = false;
    }
    check(e, ((pinned ? "cudaHostAlloc of " : "device allocation of ") +
              std::to_string(n * sizeof(T)) + " bytes").c_str());
    data_ = static_cast<T*>(p);
#else
    data_ = new T[n];
#endif
    capacity_ = n;
    size_ = n;
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
    } else if (pooled_) {
      cudaFreeAsync(data_, cudaStreamLegacy);
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
  bool pooled_ = false;  // from cudaMallocAsync
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

}  // namespace dpg::model::DPG_DEVICE_NS
