// The NCCL communicator. Its GPU check (check_gpus) is pure and runs everywhere; so does the
// refusal of a world NCCL cannot run, which must reach every rank alike and hang none. The cases
// that run NCCL need a GPU and say so (a doctest MESSAGE) where there is none: a single GPU hosts
// one NCCL rank, so they use a world of 1 (and of 2 only where there are two GPUs).
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/collective/communicator.h"
#include "runtime/collective/nccl/nccl_communicator.h"
#include "runtime/core/error.h"
#include "runtime/core/rng.h"
#include "runtime/model/device_mlp.h"
#include "runtime/model/mlp.h"
#include "tests/unit/collective/world.h"

using dpg::Code;
using dpg::Error;
using dpg::collective::check_gpus;
using dpg::collective::Communicator;
using dpg::collective::DeviceRecv;
using dpg::collective::DeviceSend;
using dpg::collective::GpuRecord;
using dpg::collective::NcclCommunicator;
using dpg::collective::NcclOptions;
using dpg::collective::Reduce;
using dpg::model::DeviceDpOptions;
using dpg::model::Mlp;
using dpg::model::MlpSpec;

namespace {

GpuRecord gpu(std::uint64_t host, unsigned char uuid_byte, int device = 0) {
  GpuRecord r;
  r.device = device;
  r.usable = 1;
  r.nccl_version = 22809;
  r.uuid.fill(0);
  r.uuid[0] = uuid_byte;
  r.uuid[15] = 0xab;
  r.host = host;
  std::snprintf(r.host_name.data(), r.host_name.size(), "node%llu",
                static_cast<unsigned long long>(host));
  return r;
}

GpuRecord no_gpu(const char* why, int device = 0) {
  GpuRecord r = gpu(1, 0, device);
  r.usable = 0;
  std::snprintf(r.error.data(), r.error.size(), "%s", why);
  return r;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The number of CUDA devices here, 0 with the reason in `why` when there is none.
int gpu_count(std::string& why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return 0;
  }
  if (n == 0) why = "no CUDA device";
  return n;
}

// Skips a case visibly: the reason is printed, and the case counts as run.
bool have_gpus(int needed) {
  std::string why;
  const int n = gpu_count(why);
  if (n >= needed) return true;
  if (n > 0) why = std::to_string(n) + " CUDA device(s), " + std::to_string(needed) + " needed";
  MESSAGE("skipped, needs " << needed << " GPU(s): " << why);
  return false;
}

// What each rank of an n-rank world (threads over the in-process transport) got from
// constructing an NcclCommunicator on device devices[rank]: nothing, or its error.
struct Outcome {
  bool threw = false;
  Code code = Code::internal;
  std::string message;
};
std::vector<Outcome> construct_everywhere(int n, const std::vector<int>& devices) {
  std::vector<Outcome> out(n);
  dpg::test::run_world(n, {}, [&](Communicator& c) {
    try {
      NcclCommunicator nccl(c, devices[c.rank()], NcclOptions{.timeout = std::chrono::seconds(10)});
    } catch (const Error& e) {
      out[c.rank()] = {true, e.code(), e.what()};
    }
  });
  return out;
}

// Holds the legacy default stream for 200 ms with a host function, so that what is queued behind
// it there (and what waits for it) has certainly not run yet when the test goes on.
void hold_legacy_stream() {
  REQUIRE(cudaLaunchHostFunc(
              cudaStreamLegacy,
              [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); },
              nullptr) == cudaSuccess);
}

// count floats on the device, from and back to the host.
struct DeviceFloats {
  float* p = nullptr;
  std::size_t count = 0;
  explicit DeviceFloats(const std::vector<float>& host) : count(host.size()) {
    REQUIRE(cudaMalloc(&p, count * sizeof(float) + 1) == cudaSuccess);
    REQUIRE(cudaMemcpy(p, host.data(), count * sizeof(float), cudaMemcpyHostToDevice) ==
            cudaSuccess);
  }
  ~DeviceFloats() { cudaFree(p); }
  std::vector<float> host() const {
    std::vector<float> h(count);
    REQUIRE(cudaMemcpy(h.data(), p, count * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
};

std::vector<float> ramp(std::size_t count, float offset = 0) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = offset + float(i % 1000) * 0.25f - 7.0f;
  return v;
}

}  // namespace

TEST_CASE("check_gpus: a GPU of its own on every rank passes") {
  const std::vector<GpuRecord> one{gpu(1, 1)};
  CHECK_FALSE(check_gpus(one).has_value());
  const std::vector<GpuRecord> four{gpu(1, 1), gpu(1, 2, 1), gpu(2, 3), gpu(2, 4, 1)};
  CHECK_FALSE(check_gpus(four).has_value());
  CHECK_FALSE(check_gpus(std::span<const GpuRecord>()).has_value());
}

TEST_CASE("check_gpus: a rank without a GPU is named, with the CUDA error, as unavailable") {
  const std::vector<GpuRecord> records{
      gpu(1, 1), no_gpu("cudaGetDeviceCount: CUDA driver version is insufficient"), gpu(2, 3)};
  const auto e = check_gpus(records);
  REQUIRE(e.has_value());
  CHECK(e->code() == Code::unavailable);
  const std::string m = e->what();
  CHECK(contains(m, "rank 1 has no CUDA device 0 (cudaGetDeviceCount: CUDA driver version is "
                    "insufficient)"));
  CHECK_FALSE(contains(m, "rank 0"));
  CHECK_FALSE(contains(m, "rank 2"));
}

TEST_CASE("check_gpus: every rank without a GPU is named, before any other problem") {
  // Ranks 0 and 2 also share a GPU, and rank 3's NCCL differs: no GPU is said first.
  std::vector<GpuRecord> records{gpu(1, 1), no_gpu("host node1 has 1 CUDA device", 3), gpu(1, 1),
                                 no_gpu("cudaSetDevice(0): out of memory")};
  records[3].nccl_version = 21903;
  const auto e = check_gpus(records);
  REQUIRE(e.has_value());
  CHECK(e->code() == Code::unavailable);
  const std::string m = e->what();
  CHECK(contains(m, "rank 1 has no CUDA device 3 (host node1 has 1 CUDA device)"));
  CHECK(contains(m, "rank 3 has no CUDA device 0 (cudaSetDevice(0): out of memory)"));
  CHECK(contains(m, "--transport tcp or shm"));
}

TEST_CASE("check_gpus: two ranks on one GPU of one host are named, with the GPU") {
  const std::vector<GpuRecord> records{gpu(1, 1), gpu(1, 2), gpu(1, 1), gpu(2, 5)};
  const auto e = check_gpus(records);
  REQUIRE(e.has_value());
  CHECK(e->code() == Code::failed_precondition);
  const std::string m = e->what();
  CHECK(contains(m, "ranks 0 and 2 share GPU " + dpg::collective::gpu_uuid_text(records[0].uuid) +
                        " on host node1"));
  CHECK(contains(m, "NCCL cannot put several ranks on one GPU"));
  CHECK(contains(m, "--transport tcp or shm"));
  CHECK_FALSE(contains(m, "rank 1"));
  CHECK_FALSE(contains(m, "rank 3"));

  // Every group of sharers is named, each with all of its ranks.
  const std::vector<GpuRecord> two_groups{gpu(1, 1), gpu(2, 7), gpu(1, 1), gpu(2, 7), gpu(1, 1)};
  const auto e2 = check_gpus(two_groups);
  REQUIRE(e2.has_value());
  const std::string m2 = e2->what();
  CHECK(contains(m2, "ranks 0, 2 and 4 share GPU"));
  CHECK(contains(m2, "ranks 1 and 3 share GPU"));
}

TEST_CASE("check_gpus: the same GPU UUID on different hosts is no conflict") {
  const std::vector<GpuRecord> records{gpu(1, 1), gpu(2, 1), gpu(3, 1)};
  CHECK_FALSE(check_gpus(records).has_value());
}

TEST_CASE("check_gpus: different NCCL versions on the ranks are refused, naming them") {
  std::vector<GpuRecord> records{gpu(1, 1), gpu(2, 1)};
  records[1].nccl_version = 21903;
  const auto e = check_gpus(records);
  REQUIRE(e.has_value());
  CHECK(e->code() == Code::failed_precondition);
  CHECK(contains(e->what(), "rank 0 2.28.9, rank 1 2.19.3"));
}

TEST_CASE("gpu_uuid_text prints a UUID the way nvidia-smi does") {
  std::array<unsigned char, 16> u{};
  for (int i = 0; i < 16; ++i) u[i] = static_cast<unsigned char>(i * 17);
  CHECK(dpg::collective::gpu_uuid_text(u) == "GPU-00112233-4455-6677-8899-aabbccddeeff");
}

TEST_CASE("NCCL without a usable GPU: every rank gets the same unavailable error, and none hangs") {
  std::string why;
  if (gpu_count(why) > 0) {
    MESSAGE("skipped: this machine has a GPU (the shared-GPU and missing-device cases say why "
            "NCCL refuses instead)");
    return;
  }
  for (int n : {1, 2, 3}) {
    CAPTURE(n);
    const auto start = std::chrono::steady_clock::now();
    const auto out = construct_everywhere(n, std::vector<int>(n, 0));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      REQUIRE(out[r].threw);
      CHECK(out[r].code == Code::unavailable);
      const std::string& m = out[r].message;
      CHECK(contains(m, "rank " + std::to_string(r) + ": nccl: "));  // the rank that reads it
      for (int q = 0; q < n; ++q) {
        CHECK(contains(m, "rank " + std::to_string(q) + " has no CUDA device 0 (" + why + ")"));
      }
    }
    MESSAGE("world " << n << ", rank 0 got: " << out[0].message);
  }
}

TEST_CASE("NCCL on a device this host lacks: unavailable on every rank, naming the rank") {
  // Rank 1 asks for device 999 (or -1), which no host has; rank 0 for device 0, which this one
  // may or may not have: either way, all fail, and rank 1 is named.
  for (int bad : {999, -1}) {
    CAPTURE(bad);
    const auto out = construct_everywhere(2, {0, bad});
    for (int r = 0; r < 2; ++r) {
      REQUIRE(out[r].threw);
      CHECK(out[r].code == Code::unavailable);
      CHECK(contains(out[r].message, "rank 1 has no CUDA device " + std::to_string(bad)));
    }
  }
}

TEST_CASE("NCCL with two ranks on one GPU: failed_precondition on every rank, before NCCL runs") {
  if (!have_gpus(1)) return;
  const auto start = std::chrono::steady_clock::now();
  const auto out = construct_everywhere(2, {0, 0});
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  for (int r = 0; r < 2; ++r) {
    REQUIRE(out[r].threw);
    CHECK(out[r].code == Code::failed_precondition);
    CHECK(contains(out[r].message, "ranks 0 and 1 share GPU GPU-"));
    CHECK(contains(out[r].message, "--transport tcp or shm"));
  }
}

TEST_CASE("NCCL world of 1: all-reduce on device memory gives the input back, sum and average") {
  if (!have_gpus(1)) return;
  dpg::test::run_world(1, {}, [&](Communicator& c) {
    NcclCommunicator nccl(c, 0);
    CHECK(nccl.rank() == 0);
    CHECK(nccl.world() == 1);
    CHECK(nccl.device() == 0);
    CHECK(nccl.timeout() == c.transport().timeout());
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1000},
                              std::size_t{(1 << 20) + 3}}) {
      for (Reduce op : {Reduce::sum, Reduce::average}) {
        CAPTURE(count);
        const auto in = ramp(count);
        DeviceFloats d(in);
        nccl.allreduce(d.p, count, op);
        CHECK(d.host() == in);
      }
    }
    nccl.allreduce(static_cast<float*>(nullptr), 0);  // nothing to do, on every rank alike
    CHECK_FALSE(nccl.failed());
  });
}

TEST_CASE("NCCL world of 1: exchange with itself copies the data; the host all-reduce works") {
  if (!have_gpus(1)) return;
  dpg::test::run_world(1, {}, [&](Communicator& c) {
    NcclCommunicator nccl(c, 0);
    const auto a = ramp(4099, 1), b = ramp(17, 2);
    DeviceFloats src_a(a), src_b(b), dst_a(std::vector<float>(a.size(), 0)),
        dst_b(std::vector<float>(b.size(), 0));
    const DeviceSend sends[] = {{0, src_a.p, a.size()}, {0, src_b.p, b.size()}, {0, nullptr, 0}};
    const DeviceRecv recvs[] = {{0, dst_a.p, a.size()}, {0, dst_b.p, b.size()}, {0, nullptr, 0}};
    nccl.exchange(sends, recvs);
    CHECK(dst_a.host() == a);  // the sends and receives between two ranks match in order
    CHECK(dst_b.host() == b);
    nccl.exchange({}, {});

    for (Reduce op : {Reduce::sum, Reduce::average}) {
      for (std::size_t count : {std::size_t{3}, std::size_t{100000}, std::size_t{5}}) {
        auto v = ramp(count, 3);
        const auto want = v;
        nccl.allreduce(std::span<float>(v), op);  // the staging buffer grows, then is reused
        CHECK(v == want);
      }
    }
    std::vector<float> none;
    nccl.allreduce(std::span<float>(none));
    CHECK_FALSE(nccl.failed());
  });
}

TEST_CASE("NCCL world of 1: a started exchange reads what the legacy stream wrote, lets that "
          "stream run, and lands by finish_exchange or the next call") {
  if (!have_gpus(1)) return;
  dpg::test::run_world(1, {}, [&](Communicator& c) {
    NcclCommunicator nccl(c, 0);
    // The legacy stream is held for 200 ms by a host function, so the memset queued behind it has
    // certainly not run when the exchange starts: the exchange's stream does not block on that
    // stream, so only the communicator's own ordering (an event recorded there) makes NCCL send
    // the memset's bytes rather than the buffer's old ones.
    const std::size_t n = std::size_t{16} << 20;
    DeviceFloats src(std::vector<float>(n, 0.0f)), dst(std::vector<float>(n, 0.0f)),
        other(std::vector<float>(n, 0.0f)), second(std::vector<float>(n, 0.0f));
    for (int round = 0; round < 3; ++round) {
      CAPTURE(round);
      const int byte = 0x11 * (round + 1);
      hold_legacy_stream();
      REQUIRE(cudaMemsetAsync(src.p, byte, n * sizeof(float), cudaStreamLegacy) == cudaSuccess);
      const DeviceSend sends[] = {{0, src.p, n}};
      const DeviceRecv recvs[] = {{0, dst.p, n}};
      nccl.start_exchange(sends, recvs);
      // The caller's work on the legacy stream meanwhile: it runs and can be waited for on its own.
      REQUIRE(cudaMemsetAsync(other.p, byte, n * sizeof(float), cudaStreamLegacy) == cudaSuccess);
      REQUIRE(cudaStreamSynchronize(cudaStreamLegacy) == cudaSuccess);
      float want = 0.0f;
      const std::vector<unsigned char> pattern(sizeof(float), static_cast<unsigned char>(byte));
      std::memcpy(&want, pattern.data(), sizeof(float));
      if (round == 0) {
        nccl.finish_exchange();
        nccl.finish_exchange();  // none in flight: nothing to do
      } else if (round == 1) {
        DeviceFloats one(ramp(5));
        nccl.allreduce(one.p, 5);  // finishes the exchange first
        CHECK(one.host() == ramp(5));
      } else {
        const DeviceSend again[] = {{0, other.p, n}};
        const DeviceRecv into[] = {{0, second.p, n}};
        nccl.start_exchange(again, into);  // finishes the first, then starts its own
        nccl.finish_exchange();
        CHECK(second.host() == std::vector<float>(n, want));
      }
      CHECK(dst.host() == std::vector<float>(n, want));
      CHECK(other.host() == std::vector<float>(n, want));
    }
    CHECK_FALSE(nccl.failed());
  });
}

TEST_CASE("NCCL world of 1: a wait that finds the work not yet done leaves no \"not ready\" "
          "behind for the model's next launch") {
  if (!have_gpus(1)) return;
  dpg::test::run_world(1, {}, [&](Communicator& c) {
    NcclCommunicator nccl(c, 0);
    // The legacy stream is held for 200 ms by a host function, and the communicator's stream
    // waits for it, so the wait's first queries of that stream answer "not ready". The runtime
    // keeps that answer as the thread's last error, which Thrust's check after each of the
    // model's launches would take for the launch's own failure.
    const std::size_t n = std::size_t{1} << 20;
    DeviceFloats src(std::vector<float>(n, 1.0f)), dst(std::vector<float>(n, 0.0f));
    for (int round = 0; round < 2; ++round) {
      CAPTURE(round);
      REQUIRE(cudaGetLastError() == cudaSuccess);
      hold_legacy_stream();
      if (round == 0) {
        const DeviceSend sends[] = {{0, src.p, n}};
        const DeviceRecv recvs[] = {{0, dst.p, n}};
        nccl.start_exchange(sends, recvs);
        nccl.finish_exchange();
        CHECK(dst.host() == std::vector<float>(n, 1.0f));
      } else {
        nccl.allreduce(src.p, n);
      }
      CHECK(cudaPeekAtLastError() == cudaSuccess);
    }
    CHECK_FALSE(nccl.failed());
  });
}

TEST_CASE("NCCL world of 1 with the CUDA model: a gradient computed while its parameters are "
          "being exchanged is the one computed without, and the exchange lands them intact") {
  if (!have_gpus(1)) return;
  dpg::test::run_world(1, {}, [&](Communicator& c) {
    NcclCommunicator nccl(c, 0);
    // Gossip's round on the GPU (train/algo_gossip.cc): the parameters go out (to itself here)
    // into a neighbour buffer while the DP gradient runs at the same parameters, then the mix.
    MlpSpec spec;
    spec.inputs = 784;
    spec.hidden = {256, 256};
    spec.classes = 10;
    const Mlp init(spec, 7);
    const std::vector<float> params(init.params().begin(), init.params().end());
    const std::size_t rows = 4096, n = params.size();
    dpg::Rng rng(3);
    std::vector<float> x(rows * 784);
    std::vector<std::int32_t> y(rows);
    for (auto& v : x) v = static_cast<float>(rng.normal());
    for (auto& v : y) v = static_cast<std::int32_t>(rng.below(10));
    std::vector<std::uint32_t> batch(2000);
    for (auto& b : batch) b = static_cast<std::uint32_t>(rng.below(rows));
    const DeviceDpOptions dp{.enabled = true, .clip_norm = 1.0f, .noise_multiplier = 1.1,
                             .expected_batch = 2000.0, .seed = 5, .rank = 0};
    auto model = dpg::model::make_cuda_mlp(spec, 0, params);
    model->upload_rows(x, y);
    std::vector<float> alone(n), overlapped(n), received(n), after(n);
    model->gradient(batch, 11, dp);
    model->download_gradient(alone);

    float* buffer = model->neighbour_buffers(1)[0];
    const DeviceSend sends[] = {{0, model->device_data(dpg::model::DeviceArray::params), n}};
    const DeviceRecv recvs[] = {{0, buffer, n}};
    nccl.start_exchange(sends, recvs);
    model->gradient(batch, 11, dp);
    nccl.finish_exchange();
    model->download_gradient(overlapped);
    CHECK(overlapped == alone);
    REQUIRE(cudaMemcpy(received.data(), buffer, n * sizeof(float), cudaMemcpyDeviceToHost) ==
            cudaSuccess);
    CHECK(received == params);
    const float half[] = {0.5f};
    model->mix_params(0.5f, half);  // x/2 + x/2 is x exactly
    model->download_params(after);
    CHECK(after == params);
    CHECK_FALSE(nccl.failed());
  });
}

TEST_CASE("NCCL: bad arguments throw invalid_argument and leave the communicator usable") {
  if (!have_gpus(1)) return;
  dpg::test::run_world(1, {}, [&](Communicator& c) {
    NcclCommunicator nccl(c, 0);
    DeviceFloats d(ramp(8));
    const DeviceSend to_nowhere[] = {{1, d.p, 8}};
    try {
      nccl.exchange(to_nowhere, {});
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.code() == Code::invalid_argument);
      CHECK(contains(e.what(), "rank 0: exchange with peer 1"));
      CHECK(contains(e.what(), "send peer 1 in a world of 1"));
    }
    const DeviceRecv into_null[] = {{0, nullptr, 8}};
    CHECK_THROWS_AS(nccl.exchange({}, into_null), Error);
    CHECK_THROWS_AS(nccl.allreduce(static_cast<float*>(nullptr), 3), Error);
    CHECK_FALSE(nccl.failed());
    nccl.allreduce(d.p, 8);
    CHECK(d.host() == ramp(8));
  });
}

TEST_CASE("NCCL world of 2 on two GPUs: all-reduce sums, exchange swaps") {
  if (!have_gpus(2)) return;
  std::vector<std::vector<float>> sums(2), swapped(2);
  dpg::test::run_world(2, {}, [&](Communicator& c) {
    const int r = c.rank();
    NcclCommunicator nccl(c, r);
    DeviceFloats d(std::vector<float>(1001, float(r + 1)));
    nccl.allreduce(d.p, d.count);
    sums[r] = d.host();
    DeviceFloats mine(ramp(33, float(r))), theirs(std::vector<float>(33, 0));
    const DeviceSend s[] = {{1 - r, mine.p, 33}};
    const DeviceRecv v[] = {{1 - r, theirs.p, 33}};
    nccl.exchange(s, v);
    swapped[r] = theirs.host();
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(sums[r] == std::vector<float>(1001, 3.0f));
    CHECK(swapped[r] == ramp(33, float(1 - r)));
  }
}
