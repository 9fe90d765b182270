// An NCCL communicator: all-reduce through ncclAllReduce and the gossip neighbour exchange through
// ncclSend/ncclRecv in one group, on GPU memory, with the same deadlines and first-failure
// poisoning as the transport contract (runtime/net/transport.h). It is bootstrapped over an
// existing CPU communicator (any transport): the ranks first agree that each has a GPU of its own,
// then rank 0's NCCL unique id is broadcast. This header includes no CUDA or NCCL header, so code
// that only holds a pointer to one, or that tests the GPU check, compiles without the toolkit.
//
// One thread uses a communicator at a time. Every call but start_exchange returns after its
// result is in place, so device data written by a call may be read on any stream; device data
// passed in must be ready (its producer synchronized, or on the legacy default stream, which the
// communicator's stream waits for at the start of every call). The communicator's stream does not
// otherwise wait for the legacy stream, nor that stream for it: kernels queued there while an
// exchange is in flight (gossip's gradient) run beside NCCL's.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

#include "runtime/collective/communicator.h"
#include "runtime/collective/device_collectives.h"
#include "runtime/core/error.h"

namespace dpg::collective {

struct NcclOptions {
  // The limit of every blocking step: the initialization and each operation. Past it the NCCL
  // communicator is aborted and the call throws deadline_exceeded. Unset: the bootstrap
  // transport's timeout, so that a hung peer is reported after the same wait on either path.
  std::optional<std::chrono::milliseconds> timeout;
  // The longest sleep between two polls of a running operation: a finished operation is noticed
  // at most this late. The polls start without sleeping, then back off up to this, so that a
  // long wait does not spin a CPU core the training thread's neighbours could use.
  std::chrono::microseconds max_poll_sleep{200};
  // How long to poll without sleeping first: a small all-reduce on one node finishes within tens
  // of microseconds, and even the shortest sleep would add to that.
  std::chrono::microseconds spin{50};
};

// What one rank tells the others before any NCCL call, so that all of them can refuse together
// (with the same error) a world NCCL cannot run, instead of some crashing or hanging in NCCL's
// own bootstrap. Travels as bytes: fixed size, no pointers.
struct GpuRecord {
  std::int32_t device = -1;       // the CUDA device index this rank asked for
  std::int32_t usable = 0;        // 1: the device exists and cudaSetDevice on it succeeded
  std::int32_t nccl_version = 0;  // ncclGetVersion() of the library this rank loaded
  std::int32_t reserved = 0;
  // cudaDeviceProp::uuid: names one physical GPU. Device indices do not (CUDA_VISIBLE_DEVICES
  // renumbers them per process), so two ranks on one GPU are found by this.
  std::array<unsigned char, 16> uuid{};
  // fnv1a64 of /proc/sys/kernel/random/boot_id (the same in every container on one kernel), or of
  // the host name where that cannot be read: ranks with the same value are on one machine.
  std::uint64_t host = 0;
  std::array<char, 64> host_name{};  // for messages; NUL-terminated
  std::array<char, 160> error{};     // why the device is not usable (the CUDA call and its text)
};
static_assert(std::is_trivially_copyable_v<GpuRecord>);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it.
std::string gpu_uuid_text(const std::array<unsigned char, 16>& uuid);

// The verdict on every rank's record (records[r] is rank r's), or nothing when NCCL can run:
// unavailable naming every rank without a usable GPU and why; failed_precondition when ranks load
// different NCCL versions, or when two ranks on one host have the same GPU (NCCL refuses several
// ranks on one GPU), naming those ranks and the GPU. The message does not name the rank that
// reads it, so every rank gets the same one. Pure: tested without a GPU.
std::optional<Error> check_gpus(std::span<const GpuRecord> records);

class NcclCommunicator final : public DeviceCollectives {
 public:
  // Collective over `bootstrap`: every rank calls it, each with its own `device` (a CUDA device
  // index on its host). Throws, on every rank alike, the error of check_gpus(); then any failure
  // of NCCL's initialization, or deadline_exceeded when it does not finish within the timeout.
  NcclCommunicator(Communicator& bootstrap, int device, NcclOptions options = {});
  // Releases the NCCL communicator (destroyed when healthy; aborted after a failure, or when
  // destroyed during unwinding, since the peers may be gone), its stream and buffers. Never throws.
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  int device() const { return device_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // In place on device memory: data (count floats on device()) becomes the sum, or the average,
  // over every rank. Every rank calls it with the same count and op.
  void allreduce(float* device_data, std::size_t count, Reduce op = Reduce::sum) override;
  // The same on host memory, staged through a device buffer the communicator keeps (grown on
  // demand).
  void allreduce(std::span<float> host, Reduce op = Reduce::sum);
  // Gossip's neighbour exchange (DeviceCollectives::exchange and its two halves): every send and
  // receive in one NCCL group on the communicator's stream. start_exchange returns once NCCL has
  // the group; finish_exchange polls it to the end within the timeout, counted from its own call.
  void start_exchange(std::span<const DeviceSend> sends,
                      std::span<const DeviceRecv> recvs) override;
  void finish_exchange() override;
  // The run's host float all-reduces go through NCCL too (staged, above).
  Communicator::FloatAllreduce host_route() override {
    return [this](std::span<float> data, Reduce op) { allreduce(data, op); };
  }

  // Whether a failure has poisoned the communicator (every later call then throws it).
  bool failed() const { return failed_; }

 private:
  struct Cuda;  // the CUDA and NCCL handles, in the .cc

  // Throws the stored first failure, with `what` as the context.
  void rethrow_if_failed(const std::string& what) const;
  // Stores the first failure (later ones are dropped), aborts NCCL, and throws it.
  [[noreturn]] void poison(Code code, const std::string& message);
  // Poisons with the NCCL call's error unless `result` (an ncclResult_t) says it was accepted.
  void launched(int result, const std::string& what, const char* call);
  // Polls NCCL's state and the stream until the work launched since `start` is done, or fails,
  // or the timeout passes (which aborts NCCL and poisons).
  void await(const std::string& what, std::chrono::steady_clock::time_point start);
  // Poisons (throws) unless `scope`, the cudaError_t of an operation's DeviceScope, is success.
  void on_device(int scope, const std::string& what);
  // After an operation's DeviceScope (whose cudaSetDevice gave `scope`): orders the
  // communicator's stream after the work queued so far on the legacy default stream, so that data
  // produced there is complete before NCCL reads it. Poisons (throws) when either step fails.
  void follow_callers(int scope, const std::string& what);
  std::string prefix() const { return rank_prefix(rank_); }

  int rank_;
  int world_;
  int device_;
  std::chrono::milliseconds timeout_;
  NcclOptions options_;
  std::unique_ptr<Cuda> cuda_;
  bool failed_ = false;
  Code code_ = Code::internal;
  std::string message_;  // the first failure, "rank R: ..."
  // The exchange start_exchange launched and finish_exchange has not waited for, as messages
  // name it; nothing when none is in flight.
  std::optional<std::string> in_flight_;
};

// Asks CUDA to load every kernel when the process's CUDA context is created
// (CUDA_MODULE_LOADING=EAGER), unless the environment already says; to be called before the
// process's first CUDA call and before it starts threads (setenv). Since CUDA 12.2 kernels load
// at their first launch, and loading one may need the context synchronized: while an NCCL kernel
// spins waiting for a peer (an exchange in flight beside the gradient), the model's launch would
// wait for that kernel, and with the peer dead would wait forever, past the communicator's
// deadline. Returns the environment's other mode when it set one (LAZY, say), else nullptr.
// A no-op returning nullptr in a build without NCCL.
const char* eager_kernel_loading_for_nccl();

// A new NcclCommunicator over `comm` on `device` (collective, like the constructor). In a build
// without NCCL it throws unavailable saying so.
std::unique_ptr<DeviceCollectives> make_nccl_collectives(Communicator& comm, int device,
                                                         NcclOptions options = {});

}  // namespace dpg::collective
