// Produces traces for tests/integration/test_trace.sh.
//   trace_writer run DIR    two peers (threads over the in-process transport) run a few steps of
//                           sample / forward_backward / clip / noise with a traced exchange that
//                           overlaps compute, each streaming DIR/trace.rankR.json; then the parts
//                           are merged into DIR/trace.json.
//   trace_writer loop PATH  records spans in a loop, flushing every 8 events, until killed.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/trace.h"
#include "runtime/net/inproc/inproc_transport.h"
#include "runtime/net/tracing_transport.h"

namespace {

using dpg::trace::Args;
using dpg::trace::Span;
using dpg::trace::Tracer;

void busy(std::chrono::microseconds d) {
  const auto until = dpg::trace::Clock::now() + d;
  while (dpg::trace::Clock::now() < until) {
  }
}

void peer(dpg::net::Transport& inner, const std::string& dir, std::exception_ptr& error) {
  try {
    const int r = inner.rank();
    Tracer tracer;
    tracer.open(dir + "/trace.rank" + std::to_string(r) + ".json", r, "rank " + std::to_string(r));
    tracer.name_thread("training");  // the name trace_summary reads as the step's own thread
    dpg::net::TracingTransport t(inner, tracer);
    std::vector<std::byte> out(1 << 16), in(1 << 16);
    double epsilon = 0.0;
    for (int step = 0; step < 20; ++step) {
      tracer.set_step(step);
      { Span s(tracer, "sample", "compute"); busy(std::chrono::microseconds(100)); }
      { Span s(tracer, "forward_backward", "compute"); busy(std::chrono::microseconds(800)); }
      { Span s(tracer, "clip", "compute"); busy(std::chrono::microseconds(100)); }
      { Span s(tracer, "noise", "compute"); busy(std::chrono::microseconds(100)); }
      // Gossip-like: post the exchange, compute while it flies, then wait.
      const dpg::net::Tag tag{7, static_cast<uint64_t>(step), 0};
      const auto rh = t.recv(1 - r, tag, in);
      const auto sh = t.send(1 - r, tag, out);
      { Span s(tracer, "update", "compute"); busy(std::chrono::microseconds(200 + 300 * r)); }
      t.wait(sh);
      t.wait(rh);
      epsilon += 0.05;
      tracer.counter("epsilon", epsilon);
    }
    { Span s(tracer, "eval", "compute"); busy(std::chrono::microseconds(500)); }
    tracer.close();
  } catch (...) {
    error = std::current_exception();
  }
}

int run(const std::string& dir) {
  dpg::net::InprocFabric fabric(2);
  std::exception_ptr errors[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] { peer(fabric.peer(r), dir, errors[r]); });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  std::vector<std::string> parts;
  for (int r = 0; r < 2; ++r)
    parts.push_back(dpg::trace::read_trace_part(dir + "/trace.rank" + std::to_string(r) + ".json"));
  const std::string merged = dpg::trace::merge_trace_parts(parts);
  std::ofstream(dir + "/trace.json", std::ios::binary) << merged;
  std::printf("trace_writer: %s/trace.json\n", dir.c_str());
  return 0;
}

int loop(const std::string& path) {
  Tracer tracer;
  tracer.open(path, 0, "rank 0", dpg::trace::Options{.flush_events = 8});
  std::thread comm([&] {  // a second thread of the same peer, as a communication thread would be
    tracer.name_thread("comm");
    for (long long i = 0;; ++i) {
      Span s(tracer, "send", "comm", Args{.peer = 1, .bytes = 4096, .op = 1, .round = i, .chunk = 0});
      std::this_thread::sleep_for(std::chrono::microseconds(30));
    }
  });
  for (long long step = 0;; ++step) {
    tracer.set_step(step);
    Span s(tracer, "forward_backward", "compute");
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "run") != 0 && std::strcmp(argv[1], "loop") != 0)) {
    std::fprintf(stderr, "usage: trace_writer run DIR | trace_writer loop PATH\n");
    return 2;
  }
  try {
    return std::strcmp(argv[1], "run") == 0 ? run(argv[2]) : loop(argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trace_writer: %s\n", e.what());
    return 1;
  }
}
