// The bench commands' option tables (apps/bench/bench_options.cc): the flags they generate parse
// into the options, and the generated checks refuse a value out of its range or list with an
// error that names the flag and the value.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "apps/bench/bench_options.h"  // and CLI::App, which its flags are added to
#include "runtime/core/error.h"

using dpg::app::AllreduceBenchOptions;
using dpg::app::StepBenchOptions;

namespace {

// The options `args` give the command, parsed by the generated flags.
template <class O, class Add> O parsed(Add add, std::vector<std::string> args) {
  O o;
  CLI::App cmd("test");
  add(cmd, o);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them reversed
  cmd.parse(reversed);
  return o;
}
StepBenchOptions step(std::vector<std::string> args) {
  return parsed<StepBenchOptions>(dpg::app::add_step_flags, std::move(args));
}
AllreduceBenchOptions allreduce(std::vector<std::string> args) {
  return parsed<AllreduceBenchOptions>(dpg::app::add_allreduce_flags, std::move(args));
}

// The check's message, "" when it passes; a refusal must be invalid_argument.
template <class O> std::string refusal(const O& o) {
  try {
    dpg::app::check(o);
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::invalid_argument);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("bench step: the defaults pass and the flags set their members") {
  CHECK(refusal(StepBenchOptions{}) == "");
  const StepBenchOptions o = step({"--widths", "8,4", "--batch", "16", "--seconds", "0.5",
                                   "--repeats", "2", "--rounds", "1", "--baseline", "torch",
                                   "--json", "--activation", "tanh", "--device", "cuda:1"});
  CHECK(o.widths == "8,4");
  CHECK(o.batch == 16);
  CHECK(o.seconds == 0.5);
  CHECK(o.repeats == 2);
  CHECK(o.rounds == 1);
  CHECK(o.baseline == "torch");
  CHECK(o.json);
  CHECK(o.activation == "tanh");
  CHECK(o.device == "cuda:1");
  CHECK(refusal(o) == "");
}

TEST_CASE("bench step: a value out of range is named by its flag") {
  CHECK(refusal(step({"--batch", "0"})) == "--batch: must be at least 1, got 0");
  CHECK(refusal(step({"--repeats", "-3"})) == "--repeats: must be at least 1, got -3");
  CHECK(refusal(step({"--rounds", "0"})) == "--rounds: must be at least 1, got 0");
  CHECK(refusal(step({"--seconds", "0"})) == "--seconds: must be in (0, 3600], got 0");
  CHECK(refusal(step({"--seconds", "1e300"})) == "--seconds: must be in (0, 3600], got 1e+300");
  CHECK(refusal(step({"--seconds", "3600"})) == "");
  CHECK(refusal(step({"--baseline", "jax"})) == "--baseline: expected torch, got \"jax\"");
  CHECK(refusal(step({"--activation", "gelu"})) ==
        "--activation: expected relu or tanh, got \"gelu\"");
  CHECK(refusal(step({"--device", "gpu"})) ==
        "--device: expected cpu, cuda or cuda:N, got \"gpu\"");
  CHECK(refusal(step({"--widths", "8"})) == "--widths: need at least inputs,classes");
  CHECK(refusal(step({"--threads", "1,x"})).starts_with("--threads: expected comma-separated"));
  // A rule between options.
  CHECK(refusal(step({"--device", "cuda", "--secure-noise"}))
            .starts_with("--secure-noise: the CPU's ChaCha20 noise"));
}

TEST_CASE("bench allreduce: the defaults pass and the flags set their members") {
  CHECK(refusal(AllreduceBenchOptions{}) == "");
  const AllreduceBenchOptions o =
      allreduce({"--peers", "8", "--sizes", "4K,1M", "--warmup", "0", "--repeats", "3",
                 "--rounds", "2", "--timeout-s", "2.5", "--transport", "tcp", "--tls",
                 "--slots", "4", "--rank", "3", "--baseline", "gloo,mpi"});
  CHECK(o.peers == 8);
  CHECK(o.sizes == "4K,1M");
  CHECK(o.warmup == 0);
  CHECK(o.timeout_s == 2.5);
  CHECK(o.transport == "tcp");
  CHECK(o.tls);
  CHECK(o.slots == 4);
  CHECK(o.rank == 3);
  CHECK(refusal(o) == "");
}

TEST_CASE("bench allreduce: a value out of range is named by its flag") {
  CHECK(refusal(allreduce({"--peers", "1"})) ==
        "--peers: must be in [2, 1024] (local processes), got 1");
  CHECK(refusal(allreduce({"--peers", "1025"})) ==
        "--peers: must be in [2, 1024] (local processes), got 1025");
  // One peer of a run across machines: the hosts file gives the peers, not --peers.
  CHECK(refusal(allreduce({"--peers", "1", "--hosts", "h.json"})) == "");
  CHECK(refusal(allreduce({"--warmup", "-1"})) == "--warmup: must be non-negative, got -1");
  CHECK(refusal(allreduce({"--repeats", "0"})) == "--repeats: must be at least 1, got 0");
  CHECK(refusal(allreduce({"--rounds", "0"})) == "--rounds: must be at least 1, got 0");
  CHECK(refusal(allreduce({"--timeout-s", "0"})) == "--timeout-s: must be in (0, 1000000], got 0");
  CHECK(refusal(allreduce({"--timeout-s", "1e300"})) ==
        "--timeout-s: must be in (0, 1000000], got 1e+300");
  CHECK(refusal(allreduce({"--sizes", "4K,6"})) ==
        "--sizes: 6 bytes is not a whole number of floats");
  CHECK(refusal(allreduce({"--baseline", "gloo,nccl"})) ==
        "--baseline: expected gloo, mpi or gloo,mpi; got \"nccl\"");
  CHECK(refusal(allreduce({"--transport", "udp"})) ==
        "--transport: expected auto, tcp, shm or nccl, got \"udp\"");
  CHECK(refusal(allreduce({"--transport", "nccl"}))
            .starts_with("--transport: nccl needs a GPU for every rank"));
  // Rules between options.
  CHECK(refusal(allreduce({"--peers", "2", "--emulated-hosts", "3"})) ==
        "--emulated-hosts: must be in [1, min(--peers, 254)], got 3");
  CHECK(refusal(allreduce({"--tls", "--transport", "shm"}))
            .starts_with("--tls: TLS runs over TCP"));
  CHECK(refusal(allreduce({"--hierarchical", "--tls"})) == "--hierarchical: not with --tls");
  CHECK(refusal(allreduce({"--secure-aggregation", "--tls"}))
            .starts_with("--secure-aggregation: not with --tls"));
}

TEST_CASE("bench allreduce: an unsigned option refuses a sign instead of wrapping it") {
  for (const char* flag : {"--segment-bytes", "--slot-bytes", "--direct-min-bytes"}) {
    CAPTURE(flag);
    try {
      (void)allreduce({flag, "-1"});
      FAIL("parsed");
    } catch (const CLI::ValidationError& e) {
      CHECK(std::string(e.what()) == std::string(flag) + ": must be >= 0, got -1");
    }
  }
  CHECK(allreduce({"--segment-bytes", "1024"}).segment_bytes == 1024);
}
