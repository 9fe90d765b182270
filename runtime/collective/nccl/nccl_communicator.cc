#include "runtime/collective/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/core/hash.h"

namespace dpg::collective {
namespace {

using Clock = std::chrono::steady_clock;

template <std::size_t N>
void put_text(std::array<char, N>& to, std::string_view from) {
  const std::size_t n = std::min(from.size(), N - 1);
  std::memcpy(to.data(), from.data(), n);
  to[n] = '\0';
}

template <std::size_t N>
std::string text_of(const std::array<char, N>& a) {
  return std::string(a.data(), strnlen(a.data(), N));
}

// "0", "0 and 1", "0, 2 and 3".
std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += i + 1 == ranks.size() ? " and " : ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

// NCCL_VERSION's two encodings: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z from 2.9.
std::string nccl_version_text(int code) {
  if (code <= 0) return "unknown";
  const bool old = code < 10000;
  const int major = old ? code / 1000 : code / 10000;
  const int minor = old ? code % 1000 / 100 : code % 10000 / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown-host";
  return name;
}

// The same on every container of one kernel: ranks that share it can share a GPU.
std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

std::string cuda_text(cudaError_t e) { return cudaGetErrorString(e); }

std::string set_device_text(int device, cudaError_t e) {
  return "cudaSetDevice(" + std::to_string(device) + "): " + cuda_text(e);
}

// A call on a non-blocking communicator that returns ncclInProgress was accepted; the state
// polled afterwards tells how it went.
bool accepted(ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; }

// A stream or event query's "not ready" is an answer, not a failure, but the runtime keeps it as
// the calling thread's last error, and NCCL before 2.29.2 leaves its own queries' there too.
// Thrust checks that error after each of the model's launches on this thread, and would report
// it as the launch's own ("parallel_for failed: device not ready"), so it is cleared after each
// NCCL launch and before a wait returns; any other error is left for its owner to see.
void clear_not_ready() {
  if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
}

// NCCL's error name and, where the library left one, its last message (which says which call of
// its own failed, and why).
std::string nccl_text(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') s += std::string(" (") + last + ")";
  return s;
}

// A peer or the network failing is the world being unavailable; NCCL refusing our arguments or
// state is a bug here (or calls that do not match between ranks).
Code nccl_code(ncclResult_t r) {
  switch (r) {
    case ncclSystemError:
    case ncclRemoteError:
    case ncclUnhandledCudaError:
      return Code::unavailable;
    default:
      return Code::internal;
  }
}

// Makes `device` current for a scope and restores the caller's device after, since CUDA's
// current device is per host thread and the caller may be using another one.
class DeviceScope {
 public:
  explicit DeviceScope(int device) : device_(device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    status_ = previous_ == device ? cudaSuccess : cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (previous_ >= 0 && previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  cudaError_t status() const { return status_; }

 private:
  int device_;
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

// This rank's answer to "can NCCL run here, and on which GPU".
GpuRecord local_record(int device) {
  GpuRecord r;
  r.device = device;
  int version = 0;
  if (ncclGetVersion(&version) == ncclSuccess) r.nccl_version = version;
  const std::string name = host_name();
  const std::string boot = boot_id();
  put_text(r.host_name, name);
  r.host = fnv1a64(boot.empty() ? "hostname:" + name : "boot_id:" + boot);

  if (device < 0) {
    put_text(r.error, "not a device index");
    return r;
  }
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    cudaGetLastError();  // clear it, so that it is not reported again by an unrelated call
    put_text(r.error, "cudaGetDeviceCount: " + cuda_text(e));
    return r;
  }
  if (device >= count) {
    put_text(r.error, "host " + name + " has " + std::to_string(count) + " CUDA device" +
                          (count == 1 ? "" : "s"));
    return r;
  }
  cudaDeviceProp props{};
  if (const cudaError_t e = cudaGetDeviceProperties(&props, device); e != cudaSuccess) {
    cudaGetLastError();
    put_text(r.error, "cudaGetDeviceProperties: " + cuda_text(e));
    return r;
  }
  static_assert(sizeof props.uuid.bytes == 16);
  std::memcpy(r.uuid.data(), props.uuid.bytes, 16);
  // Creates the device's context: a GPU in exclusive-process mode that another process holds, or
  // one that is out of memory, fails here rather than inside NCCL. Setting the device creates it
  // only where the device was not current already; cudaFree(nullptr) frees nothing and creates
  // it wherever it is still missing.
  DeviceScope on(device);
  cudaError_t made = on.status();
  if (made == cudaSuccess) made = cudaFree(nullptr);
  if (made != cudaSuccess) {
    cudaGetLastError();
    put_text(r.error, on.status() != cudaSuccess
                          ? set_device_text(device, made)
                          : "creating GPU " + std::to_string(device) + "'s context: " +
                                cuda_text(made));
    return r;
  }
  r.usable = 1;
  return r;
}

// Rank 0's NCCL unique id, or why it could not make one: every rank needs to know either way.
struct IdRecord {
  std::int32_t status = 0;  // ncclResult_t of ncclGetUniqueId
  std::array<char, 160> error{};
  ncclUniqueId id{};
};

}  // namespace

std::string gpu_uuid_text(const std::array<unsigned char, 16>& uuid) {
  std::string s = "GPU-";
  char hex[3];
  for (std::size_t i = 0; i < uuid.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    std::snprintf(hex, sizeof hex, "%02x", uuid[i]);
    s += hex;
  }
  return s;
}

std::optional<Error> check_gpus(std::span<const GpuRecord> records) {
  std::string missing;
  for (std::size_t r = 0; r < records.size(); ++r) {
    if (records[r].usable) continue;
    if (!missing.empty()) missing += "; ";
    missing += "rank " + std::to_string(r) + " has no CUDA device " +
               std::to_string(records[r].device) + " (" + text_of(records[r].error) + ")";
  }
  if (!missing.empty()) {
    return Error(Code::unavailable,
                 "nccl: " + missing + "; NCCL needs a GPU for every rank (the Asio transport, "
                 "--transport tcp or shm, needs none)");
  }

  for (std::size_t r = 1; r < records.size(); ++r) {
    if (records[r].nccl_version == records[0].nccl_version) continue;
    std::string versions;
    for (std::size_t q = 0; q < records.size(); ++q) {
      versions += (q > 0 ? ", rank " : "rank ") + std::to_string(q) + " " +
                  nccl_version_text(records[q].nccl_version);
    }
    return Error(Code::failed_precondition,
                 "nccl: the ranks load different NCCL libraries (" + versions +
                     "); NCCL needs the same version on every rank");
  }

  // Ranks by (host, GPU), in the order of each group's first rank.
  std::map<std::pair<std::uint64_t, std::array<unsigned char, 16>>, std::vector<int>> by_gpu;
  for (std::size_t r = 0; r < records.size(); ++r) {
    by_gpu[{records[r].host, records[r].uuid}].push_back(static_cast<int>(r));
  }
  std::vector<std::vector<int>> shared;
  for (auto& [key, ranks] : by_gpu) {
    if (ranks.size() > 1) shared.push_back(ranks);
  }
  if (shared.empty()) return std::nullopt;
  std::sort(shared.begin(), shared.end());
  std::string which;
  for (const auto& ranks : shared) {
    const GpuRecord& first = records[ranks.front()];
    if (!which.empty()) which += "; ";
    which += "ranks " + rank_list(ranks) + " share GPU " + gpu_uuid_text(first.uuid) +
             " on host " + text_of(first.host_name);
  }
  return Error(Code::failed_precondition,
               "nccl: " + which + ": NCCL cannot put several ranks on one GPU; give each rank a "
               "GPU of its own, or use the Asio transport (--transport tcp or shm), which can");
}

struct NcclCommunicator::Cuda {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t callers = nullptr;  // marks the legacy stream's work the next operation waits for
  float* staging = nullptr;       // the host all-reduce's device copy
  std::size_t staging_count = 0;

  // Frees what is left; a communicator still here was never finished cleanly, so it is aborted.
  ~Cuda() {
    if (comm != nullptr) ncclCommAbort(comm);
    if (staging != nullptr) cudaFree(staging);
    if (callers != nullptr) cudaEventDestroy(callers);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

NcclCommunicator::NcclCommunicator(Communicator& bootstrap, int device, NcclOptions options)
    : rank_(bootstrap.rank()),
      world_(bootstrap.world()),
      device_(device),
      timeout_(options.timeout.value_or(bootstrap.transport().timeout())),
      options_(options),
      cuda_(std::make_unique<Cuda>()) {
  if (timeout_ <= std::chrono::milliseconds(0)) {
    fail(Code::invalid_argument, prefix() + "nccl: the timeout must be positive, not " +
                                     std::to_string(timeout_.count()) + " ms");
  }
  // Every rank, before any NCCL call, says whether it has a GPU and which; all then refuse
  // together a world NCCL cannot run, since NCCL itself would crash or hang on it.
  const GpuRecord mine = local_record(device);
  std::vector<GpuRecord> all(world_);
  bootstrap.allgather(public_value(std::as_bytes(std::span(&mine, 1))),
                      std::as_writable_bytes(std::span(all)));
  if (auto e = check_gpus(all)) throw Error(e->code(), prefix() + e->what());

  IdRecord id;
  if (rank_ == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id.id);
    if (r != ncclSuccess) {
      id.status = r;
      put_text(id.error, nccl_text(r, nullptr));
    }
  }
  bootstrap.broadcast(public_value(std::as_writable_bytes(std::span(&id, 1))), 0);
  if (id.status != ncclSuccess) {
    throw Error(nccl_code(static_cast<ncclResult_t>(id.status)),
                prefix() + "nccl: rank 0 could not make the NCCL unique id (ncclGetUniqueId: " +
                    text_of(id.error) + ")");
  }

  const std::string what = "NCCL initialization (ncclCommInitRankConfig, rank " +
                           std::to_string(rank_) + " of " + std::to_string(world_) +
                           ", device " + std::to_string(device_) + ")";
  DeviceScope on(device_);
  on_device(on.status(), what);
  // A stream of its own that does not block on the legacy default stream, nor that stream on it,
  // so that the model's kernels run while an exchange is in flight; each operation instead waits
  // for an event recorded there (follow_callers).
  if (const cudaError_t e = cudaStreamCreateWithFlags(&cuda_->stream, cudaStreamNonBlocking);
      e != cudaSuccess) {
    cuda_->stream = nullptr;
    poison(Code::unavailable, prefix() + what + ": cudaStreamCreateWithFlags: " + cuda_text(e));
  }
  if (const cudaError_t e = cudaEventCreateWithFlags(&cuda_->callers, cudaEventDisableTiming);
      e != cudaSuccess) {
    cuda_->callers = nullptr;
    poison(Code::unavailable, prefix() + what + ": cudaEventCreateWithFlags: " + cuda_text(e));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once, so each wait can have a deadline
  config.commName = "dpgossip";
  const auto start = Clock::now();
  const ncclResult_t r = ncclCommInitRankConfig(&cuda_->comm, world_, id.id, rank_, &config);
  if (!accepted(r)) poison(nccl_code(r), prefix() + what + " failed: " + nccl_text(r, cuda_->comm));
  if (cuda_->comm == nullptr) {
    poison(Code::internal, prefix() + what + " returned no communicator");
  }
  await(what, start);
}

NcclCommunicator::~NcclCommunicator() {
  if (!cuda_) return;
  // A non-blocking communicator takes no call while an exchange is still being placed on its
  // stream: the one in flight is finished first (a failure poisons, and the abort below follows).
  // During unwinding the peers may be gone, so it is left to the abort.
  if (std::uncaught_exceptions() == 0) {
    try {
      finish_exchange();
    } catch (const std::exception&) {
    }
  }
  DeviceScope on(device_);
  if (cuda_->comm != nullptr && !failed_ && std::uncaught_exceptions() == 0) {
    // Finishes the communicator's work with the peers, within the deadline; the destroy that
    // follows then only frees local resources. A communicator that does not finish (a peer is
    // gone) is aborted by ~Cuda.
    const auto deadline = Clock::now() + timeout_;
    ncclResult_t state = ncclCommFinalize(cuda_->comm);
    while (state == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(options_.max_poll_sleep);
      if (ncclCommGetAsyncError(cuda_->comm, &state) != ncclSuccess) state = ncclInternalError;
    }
    clear_not_ready();
    if (state == ncclSuccess) {
      // Whatever it returns, the handle is not touched again: a leak beats a double free.
      ncclCommDestroy(cuda_->comm);
      cuda_->comm = nullptr;
    }
  }
  cuda_.reset();
}

void NcclCommunicator::rethrow_if_failed(const std::string& what) const {
  if (!failed_) return;
  const std::string p = prefix();
  const bool ours = message_.rfind(p, 0) == 0;  // do not say "rank R:" twice
  throw Error(code_, p + what + " failed: " + (ours ? message_.substr(p.size()) : message_));
}

void NcclCommunicator::poison(Code code, const std::string& message) {
  if (!failed_) {
    failed_ = true;
    code_ = code;
    message_ = message;
  }
  // NCCL's advice after any error: nothing can be assumed of the operations in flight, and
  // only an abort stops its kernels and proxy threads.
  if (cuda_ && cuda_->comm != nullptr) {
    ncclCommAbort(cuda_->comm);
    cuda_->comm = nullptr;
  }
  throw Error(code, message);
}

void NcclCommunicator::await(const std::string& what, std::chrono::steady_clock::time_point start) {
  const auto deadline = start + timeout_;
  auto nap = std::chrono::microseconds(1);
  for (;;) {
    // A non-blocking communicator may still be placing the work on the stream (state
    // ncclInProgress); only once it is there does the stream's state mean anything.
    ncclResult_t state = ncclInProgress;
    if (const ncclResult_t r = ncclCommGetAsyncError(cuda_->comm, &state); r != ncclSuccess) {
      poison(nccl_code(r),
             prefix() + what + ": ncclCommGetAsyncError: " + nccl_text(r, cuda_->comm));
    }
    if (state != ncclSuccess && state != ncclInProgress) {
      poison(nccl_code(state), prefix() + what + " failed after " +
                                   seconds_text(Clock::now() - start) + ": " +
                                   nccl_text(state, cuda_->comm));
    }
    if (state == ncclSuccess) {
      const cudaError_t e = cuda_->stream ? cudaStreamQuery(cuda_->stream) : cudaSuccess;
      // The query's "not ready", or NCCL's own, cleared before this returns to the caller's
      // work (between passes there is none).
      clear_not_ready();
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) {
        poison(Code::unavailable, prefix() + what + " failed after " +
                                      seconds_text(Clock::now() - start) + ": " + cuda_text(e));
      }
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      poison(Code::deadline_exceeded,
             prefix() + what + " timed out after " + seconds_text(now - start) +
                 ": a peer did not make the matching call, or is hung (the NCCL communicator "
                 "is aborted)");
    }
    if (now - start < options_.spin) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, options_.max_poll_sleep);
    }
  }
}

void NcclCommunicator::on_device(int scope, const std::string& what) {
  if (scope != cudaSuccess) {
    poison(Code::unavailable,
           prefix() + what + ": " + set_device_text(device_, static_cast<cudaError_t>(scope)));
  }
}

void NcclCommunicator::follow_callers(int scope, const std::string& what) {
  on_device(scope, what);
  cudaError_t e = cudaEventRecord(cuda_->callers, cudaStreamLegacy);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(cuda_->stream, cuda_->callers, 0);
  if (e != cudaSuccess) {
    poison(Code::unavailable,
           prefix() + what + ": ordering after the legacy default stream: " + cuda_text(e));
  }
}

void NcclCommunicator::launched(int result, const std::string& what, const char* call) {
  clear_not_ready();
  const auto r = static_cast<ncclResult_t>(result);
  if (!accepted(r)) {
    poison(nccl_code(r), prefix() + what + ": " + call + ": " + nccl_text(r, cuda_->comm));
  }
}

void NcclCommunicator::allreduce(float* device_data, std::size_t count, Reduce op) {
  const std::string what = "allreduce of " + std::to_string(count) + " floats";
  rethrow_if_failed(what);
  finish_exchange();
  if (count == 0) return;  // every rank passes the same count, so all skip together
  if (device_data == nullptr) fail(Code::invalid_argument, prefix() + what + ": null data");
  DeviceScope on(device_);
  follow_callers(on.status(), what);
  const auto start = Clock::now();
  launched(ncclAllReduce(device_data, device_data, count, ncclFloat,
                         op == Reduce::average ? ncclAvg : ncclSum, cuda_->comm, cuda_->stream),
           what, "ncclAllReduce");
  await(what, start);
}

void NcclCommunicator::allreduce(std::span<float> host, Reduce op) {
  const std::string what =
      "allreduce of " + std::to_string(host.size()) + " floats from host memory";
  rethrow_if_failed(what);
  finish_exchange();
  if (host.empty()) return;
  DeviceScope on(device_);
  follow_callers(on.status(), what);
  // Past this point the peers expect this call: a failure leaves the communicator out of step
  // with them, so it poisons.
  if (cuda_->staging_count < host.size()) {
    if (cuda_->staging != nullptr) cudaFree(cuda_->staging);
    cuda_->staging = nullptr;
    cuda_->staging_count = 0;
    void* p = nullptr;
    if (const cudaError_t e = cudaMalloc(&p, host.size_bytes()); e != cudaSuccess) {
      cudaGetLastError();
      poison(Code::unavailable, prefix() + what + ": cudaMalloc of " +
                                    std::to_string(host.size_bytes()) + " bytes: " + cuda_text(e));
    }
    cuda_->staging = static_cast<float*>(p);
    cuda_->staging_count = host.size();
  }
  const auto start = Clock::now();
  auto copy = [&](void* to, const void* from, cudaMemcpyKind kind) {
    if (const cudaError_t e = cudaMemcpyAsync(to, from, host.size_bytes(), kind, cuda_->stream);
        e != cudaSuccess) {
      poison(Code::unavailable, prefix() + what + ": cudaMemcpyAsync: " + cuda_text(e));
    }
  };
  copy(cuda_->staging, host.data(), cudaMemcpyHostToDevice);
  launched(ncclAllReduce(cuda_->staging, cuda_->staging, host.size(), ncclFloat,
                         op == Reduce::average ? ncclAvg : ncclSum, cuda_->comm, cuda_->stream),
           what, "ncclAllReduce");
  // Waits before copying back: a copy into pageable memory blocks the host until the stream
  // reaches it, which would be without a deadline if the all-reduce hung.
  await(what, start);
  copy(host.data(), cuda_->staging, cudaMemcpyDeviceToHost);
  await(what, start);
}

void NcclCommunicator::start_exchange(std::span<const DeviceSend> sends,
                                      std::span<const DeviceRecv> recvs) {
  finish_exchange();
  std::vector<int> peers;
  std::size_t floats = 0;
  for (const auto& s : sends) {
    peers.push_back(s.peer);
    floats += s.count;
  }
  for (const auto& r : recvs) {
    peers.push_back(r.peer);
    floats += r.count;
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  const std::string what = "exchange with peer" + std::string(peers.size() == 1 ? " " : "s ") +
                           rank_list(peers) + " (" + std::to_string(sends.size()) + " sends, " +
                           std::to_string(recvs.size()) + " receives, " + std::to_string(floats) +
                           " floats)";
  rethrow_if_failed(what);
  auto check = [&](int peer, const void* data, std::size_t count, const char* kind) {
    if (peer < 0 || peer >= world_) {
      fail(Code::invalid_argument, prefix() + what + ": " + kind + " peer " +
                                       std::to_string(peer) + " in a world of " +
                                       std::to_string(world_));
    }
    if (data == nullptr && count > 0) {
      fail(Code::invalid_argument,
           prefix() + what + ": null " + kind + " buffer for peer " + std::to_string(peer));
    }
  };
  for (const auto& s : sends) check(s.peer, s.data, s.count, "send");
  for (const auto& r : recvs) check(r.peer, r.data, r.count, "receive");
  if (floats == 0) return;

  DeviceScope on(device_);
  follow_callers(on.status(), what);
  // All in one group, so that NCCL runs them concurrently: one at a time, two ranks that each
  // send to the other first would wait for each other forever. The group is always closed, even
  // after a failed call inside it. Empty buffers are left out on both sides alike (the counts
  // match between peers).
  ncclResult_t first = ncclGroupStart();
  const char* call = "ncclGroupStart";
  if (accepted(first)) {
    for (const auto& s : sends) {
      if (s.count == 0 || !accepted(first)) continue;
      first = ncclSend(s.data, s.count, ncclFloat, s.peer, cuda_->comm, cuda_->stream);
      call = "ncclSend";
    }
    for (const auto& r : recvs) {
      if (r.count == 0 || !accepted(first)) continue;
      first = ncclRecv(r.data, r.count, ncclFloat, r.peer, cuda_->comm, cuda_->stream);
      call = "ncclRecv";
    }
    const ncclResult_t end = ncclGroupEnd();
    if (accepted(first)) {
      first = end;
      call = "ncclGroupEnd";
    }
  }
  launched(first, what, call);
  in_flight_ = what;
}

void NcclCommunicator::finish_exchange() {
  if (!in_flight_) return;
  const std::string what = std::move(*in_flight_);
  in_flight_.reset();
  rethrow_if_failed(what);
  DeviceScope on(device_);
  on_device(on.status(), what);
  // The deadline counts from here, as a transport's wait does, not from the start: the caller's
  // work in between (the gradient) is not the peers' to answer for.
  await(what, Clock::now());
}

const char* eager_kernel_loading_for_nccl() {
  const char* mode = std::getenv("CUDA_MODULE_LOADING");
  if (mode == nullptr) {
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    return nullptr;
  }
  return std::string_view(mode) == "EAGER" ? nullptr : mode;
}

std::unique_ptr<DeviceCollectives> make_nccl_collectives(Communicator& comm, int device,
                                                         NcclOptions options) {
  return std::make_unique<NcclCommunicator>(comm, device, options);
}

}  // namespace dpg::collective
