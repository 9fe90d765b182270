// The MLP on an accelerator: the same model, parameter layout and DP-SGD step as the CPU
// reference (mlp.h, runtime/train/gradient.h), with the parameters, the optimiser state, the
// training rows and every per-batch buffer resident in device memory. Only what a caller asks
// for crosses to the host: the released gradient or the parameters when they go on the wire, the
// step's few counters, and an evaluation's sums.
//
// One source (cuda/device_mlp_impl.h) is compiled twice:
// - by nvcc for CUDA (cuda/device_mlp_cuda.cu): the matrix products in cuBLAS, the element-wise and
//   reduction work in Thrust's CUDA backend, the noise from cuRAND's Philox4x32-10;
// - by the host compiler with Thrust's C++ backend (cuda/device_mlp_host.cc), the products in the CPU
//   sgemm and the noise from cuRAND's host generator (the same Philox stream). It runs where no
//   GPU is, so the reference tests check the backend's arithmetic on every machine.
//
// The DP step is the CPU's: per-example gradient norms without per-example gradients (the ghost
// factorisation |g_i|^2 (|a_i|^2 + 1) per layer), clip factors min(1, C / (|g_i| + 1e-6)) with a
// non-finite norm dropping the example, the clipped sum as one matrix product per layer, then
// N(0, (sigma C)^2) on every coordinate and the division by the public expected batch size.
//
// Noise: Philox4x32-10 keyed by a hash of (seed, rank, step), so a run is reproducible, and no two
// peers or steps share a key except with probability 2^-64 per pair. Like any floating-point
// Gaussian it has the limits docs/PRIVACY.md states for the CPU's; --secure-noise stays a CPU
// feature (its key comes from the operating system and its stream from ChaCha20).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/model/mlp.h"

namespace dpg::model {

// The model's arrays that cross to the host: the parameters (gossip's messages, the model
// averages, evaluations), the released gradient (the all-reduce's message) and the parameters'
// moving average (evaluations, checkpoints).
enum class DeviceArray { params, gradient, average };

// One step's privacy settings on the device (dp::MechanismOptions's, without the CPU-only modes).
struct DeviceDpOptions {
  bool enabled = true;            // false: plain SGD's gradient (no clipping, no noise)
  float clip_norm = 1.0f;         // C
  double noise_multiplier = 1.0;  // sigma: the noise standard deviation is sigma * C
  double expected_batch = 1.0;    // public denominator: q * dataset size
  std::uint64_t seed = 0;         // with rank and step, the key of the step's noise
  std::uint64_t rank = 0;
  std::size_t physical_batch = 0;  // virtual batches: the most rows a pass holds (0: all)
};

// runtime/train/gradient.h's StepStats, counted on the device.
struct DeviceStepStats {
  std::size_t batch = 0;
  double loss_sum = 0.0;    // over the kept examples under DP
  std::size_t correct = 0;
  std::size_t dropped = 0;  // non-finite gradient: left out of the sum
  std::size_t clipped = 0;  // norm above C
};

// torch.optim.SGD's rule, as runtime/train/optimizer.h's Sgd applies it.
struct DeviceSgdOptions {
  double lr = 0.1;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class DeviceMlp {
 public:
  virtual ~DeviceMlp() = default;

  virtual const MlpSpec& spec() const = 0;
  virtual std::size_t num_params() const = 0;
  // "cuda:0 (NVIDIA H100 80GB HBM3)", or "host (Thrust C++ backend)".
  virtual std::string device_name() const = 0;

  // The flat parameter vector (Mlp's layout) to and from the device.
  virtual void upload_params(std::span<const float> params) = 0;
  virtual void download_params(std::span<float> params) const = 0;

  // Makes (rows, inputs) features and their labels the resident training rows.
  virtual void upload_rows(std::span<const float> x, std::span<const std::int32_t> labels) = 0;
  virtual std::size_t resident_rows() const = 0;

  // Step t's gradient on the resident rows `batch` (indices, repeats allowed): forward, backward,
  // and under DP the per-example norms, clipping, the clipped sum and the noise; then the
  // division by the expected batch size. The result stays on the device (download_gradient).
  // An empty batch gives the noise alone. Indices out of range throw invalid_argument.
  virtual DeviceStepStats gradient(std::span<const std::uint32_t> batch, long long t,
                                   const DeviceDpOptions& dp) = 0;
  virtual void download_gradient(std::span<float> out) const = 0;
  // Replaces the device gradient (an exchange's result, combined on the host).
  virtual void upload_gradient(std::span<const float> gradient) = 0;

  // params -= lr * (momentum buffer of g + weight_decay * params), with the device gradient g.
  virtual void sgd_step(const DeviceSgdOptions& options) = 0;
  // The momentum buffer and whether a step was taken, as Sgd::restore takes them.
  virtual void download_momentum(std::span<float> out) const = 0;
  virtual void restore_momentum(std::span<const float> velocity, bool started) = 0;

  // --- Device-resident training: the parameters, momentum and gradient stay here between steps,
  // and only what goes on the wire crosses to the host, through pinned staging buffers.

  // The parameters' exponential moving average (train/optimizer.h's ParamAverage, its
  // arithmetic): average = decay * average + (1 - decay) * params. The average starts as the
  // parameters the model was made with; stream_in sets it.
  virtual void average_step(float decay) = 0;
  // Whether sgd_step() has set the momentum buffer (the first step sets it to the gradient).
  virtual bool momentum_started() const = 0;
  // The array's device address (for NCCL, which reads and writes device memory); in the host
  // instance, host memory. Valid for the model's life.
  virtual float* device_data(DeviceArray which) = 0;
  // Copies the ranges (offset, count) of `which` to the host, in order, through a few pinned
  // staging buffers: while ready(offset, values) takes one range (values are valid during the
  // call only), the copies of the next ones run on the copy engine. So a caller that sends each
  // range as it comes overlaps the copies with the network.
  using ReadyRange = std::function<void(std::size_t offset, std::span<const float> values)>;
  virtual void stream_out(DeviceArray which,
                          std::span<const std::pair<std::size_t, std::size_t>> ranges,
                          const ReadyRange& ready) = 0;
  // Copies `values` into `which` from `offset` on, through the pinned staging buffers in chunks
  // (the host fills one while the previous one crosses); returns when all of it is there.
  virtual void stream_in(DeviceArray which, std::size_t offset, std::span<const float> values) = 0;
  // `count` device buffers of num_params() floats each, for the neighbours' models of a gossip
  // round (NCCL receives into them); grown on demand and kept, valid until the next call.
  virtual std::vector<float*> neighbour_buffers(std::size_t count) = 0;
  // params = self_weight * params + sum_k weights[k] * neighbour_buffers()[k], the neighbours in
  // order: collective::mix_range's arithmetic, so the host instance gives its bits.
  virtual void mix_params(float self_weight, std::span<const float> weights) = 0;

  // Loss sum and correct predictions over (rows, inputs) host features, in device-sized chunks.
  virtual Mlp::Evaluation evaluate(std::span<const float> x,
                                   std::span<const std::int32_t> labels) = 0;
};

// The values a staged copy moves at a time, where the caller has no pieces of its own: large
// enough that a copy's fixed cost (some microseconds) is small beside its transfer, small enough
// that the four staging buffers stay a few MB.
inline constexpr std::size_t kStagingChunk = 256 * 1024;

// [0, count) in ranges of at most `chunk` values (one empty range when count is 0), for
// DeviceMlp::stream_out.
inline std::vector<std::pair<std::size_t, std::size_t>> chunk_ranges(std::size_t count,
                                                                     std::size_t chunk) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  chunk = chunk == 0 ? 1 : chunk;
  for (std::size_t b = 0; b < count; b += chunk) out.emplace_back(b, std::min(chunk, count - b));
  if (out.empty()) out.emplace_back(0, 0);
  return out;
}

// The whole of `which` into `out` (num_params() values), through the staging buffers.
inline void stream_out_all(DeviceMlp& device, DeviceArray which, std::span<float> out) {
  device.stream_out(which, chunk_ranges(out.size(), kStagingChunk),
                    [&](std::size_t offset, std::span<const float> v) {
                      std::copy(v.begin(), v.end(), out.begin() + static_cast<long>(offset));
                    });
}

// The Philox key of step t's noise on peer `rank` under `seed`: SplitMix64's finaliser over the
// three, in a domain of its own. cuRAND's Philox4x32-10 seeded with it, at offset 0, gives the
// step's normals (curandGenerateNormal, mean 0, standard deviation sigma C), on the host or the
// device alike.
inline std::uint64_t device_noise_key(std::uint64_t seed, std::uint64_t rank, long long t) {
  auto mix = [](std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::uint64_t h = mix(seed ^ 0x6470676f73736970ull);  // "dpgossip": the device noise's domain
  h = mix(h ^ rank);
  return mix(h ^ static_cast<std::uint64_t>(t));
}

// Whether this build has the CUDA backend.
bool cuda_backend_built();
// The number of CUDA devices; 0 with `why` set when there are none or the driver cannot run
// (no GPU, a driver older than the runtime, a build without CUDA).
int cuda_device_count(std::string* why);
// The MLP on CUDA device `device` with the parameters `params` (Mlp's layout). Throws
// unavailable naming the device when there is no such device or the build has no CUDA.
std::unique_ptr<DeviceMlp> make_cuda_mlp(const MlpSpec& spec, int device,
                                         std::span<const float> params);
// The host instance of the same source (Thrust's C++ backend); in the test library only.
std::unique_ptr<DeviceMlp> make_host_thrust_mlp(const MlpSpec& spec,
                                                std::span<const float> params);

}  // namespace dpg::model
