#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <set>
#include <thread>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/trace.h"
#include "tests/unit/trace/trace_test_util.h"

// Every allocation of this binary goes through these, so a test can count them honestly.
namespace {
std::atomic<long long> g_allocations{0};
}

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void* operator new(std::size_t n, std::align_val_t a) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  const std::size_t al = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace dpg::trace::testing {
long long allocations() { return g_allocations.load(std::memory_order_relaxed); }
}  // namespace dpg::trace::testing

using dpg::trace::Args;
using dpg::trace::Clock;
using dpg::trace::Span;
using dpg::trace::Tracer;
using dpg::trace::testing::allocations;
using dpg::trace::testing::parse_file;
using dpg::trace::testing::TempDir;
using nlohmann::json;

namespace {

std::vector<json> events_named(const json& events, const std::string& name) {
  std::vector<json> out;
  for (const auto& e : events)
    if (e.at("name") == name) out.push_back(e);
  return out;
}

}  // namespace

TEST_CASE("the allocation counter sees allocations") {
  const long long before = allocations();
  void* p = ::operator new(64);  // a direct call, which the compiler may not elide
  ::operator delete(p);
  CHECK(allocations() - before == 1);
}

TEST_CASE("an off tracer records nothing and allocates nothing") {
  Tracer tracer;
  CHECK_FALSE(tracer.on());
  const auto t0 = Clock::now();
  const long long before = allocations();
  constexpr int n = 100000;
  for (int i = 0; i < n; ++i) {
    tracer.set_step(i);
    Span span(&tracer, "forward", "compute", Args{.peer = 1, .bytes = 64});
    span.args().step = i;
    tracer.complete("send", "comm", t0, t0, Args{.peer = 2, .bytes = 4096});
    tracer.counter("epsilon", 0.5 * i);
    tracer.counter("epsilon", 0.5 * i, t0);
    tracer.name_thread("main");
    Span null_span(nullptr, "clip", "compute");
  }
  CHECK(allocations() - before == 0);
  CHECK(tracer.written() == 0);
  tracer.flush();  // a no-op when never opened
  tracer.close();
}

TEST_CASE("events come out as Trace Event JSON with the right fields") {
  TempDir dir;
  const std::string path = dir.file("rank3.json");
  Tracer tracer;
  tracer.open(path, 3, "rank 3");
  CHECK(tracer.on());
  tracer.name_thread("main");
  tracer.set_step(7);
  {
    Span span(tracer, "forward", "compute");
  }
  {
    Span span(&tracer, "send", "comm", Args{.peer = 1, .bytes = 4096, .op = 2, .round = 5, .chunk = 0});
    span.args().bytes = 8192;
  }
  const auto b = Clock::now();
  tracer.complete("noise", "compute", b, b + std::chrono::microseconds(1500), Args{.step = 9});
  tracer.counter("epsilon", 1.25);
  tracer.close();
  CHECK_FALSE(tracer.on());

  const json events = parse_file(path);
  REQUIRE(events.is_array());
  for (const auto& e : events) {
    CHECK(e.contains("name"));
    CHECK(e.contains("ph"));
    CHECK(e.contains("ts"));
    CHECK(e.at("pid") == 3);
    CHECK(e.contains("tid"));
  }
  const auto meta = events_named(events, "process_name");
  REQUIRE(meta.size() == 1);
  CHECK(meta[0].at("ph") == "M");
  CHECK(meta[0].at("args").at("name") == "rank 3");
  const auto thread_names = events_named(events, "thread_name");
  REQUIRE(thread_names.size() == 1);
  CHECK(thread_names[0].at("args").at("name") == "main");
  CHECK(thread_names[0].at("tid") == Tracer::thread_id());

  const auto fwd = events_named(events, "forward");
  REQUIRE(fwd.size() == 1);
  CHECK(fwd[0].at("ph") == "X");
  CHECK(fwd[0].at("cat") == "compute");
  CHECK(fwd[0].at("dur").get<double>() >= 0.0);
  CHECK(fwd[0].at("args").at("step") == 7);
  CHECK_FALSE(fwd[0].at("args").contains("peer"));

  const auto send = events_named(events, "send");
  REQUIRE(send.size() == 1);
  const json& a = send[0].at("args");
  CHECK(a.at("peer") == 1);
  CHECK(a.at("bytes") == 8192);
  CHECK(a.at("op") == 2);
  CHECK(a.at("round") == 5);
  CHECK(a.at("chunk") == 0);
  CHECK(a.at("step") == 7);
  CHECK(send[0].at("ts").get<double>() >= fwd[0].at("ts").get<double>());

  const auto noise = events_named(events, "noise");
  REQUIRE(noise.size() == 1);
  CHECK(noise[0].at("dur").get<double>() == doctest::Approx(1500.0));
  CHECK(noise[0].at("args").at("step") == 9);  // its own step wins over the tracer's

  const auto eps = events_named(events, "epsilon");
  REQUIRE(eps.size() == 1);
  CHECK(eps[0].at("ph") == "C");
  CHECK(eps[0].at("args").at("epsilon") == 1.25);
  CHECK(tracer.written() == 5);
}

TEST_CASE("the part file parses after every flush") {
  TempDir dir;
  const std::string path = dir.file("part.json");
  Tracer tracer;
  tracer.open(path, 0, "rank 0", dpg::trace::Options{.flush_events = 3});
  CHECK(parse_file(path).size() == 2);  // the metadata alone
  std::size_t last = 2;
  int flushes = 0;
  for (int i = 0; i < 40; ++i) {
    tracer.set_step(i);
    { Span span(tracer, "sample", "compute"); }
    const json events = parse_file(path);  // throws when the file is not valid JSON
    CHECK(events.size() >= last);
    if (events.size() > last) ++flushes;
    last = events.size();
    if (i % 7 == 0) {
      tracer.flush();
      CHECK(parse_file(path).size() == std::size_t(i + 1) + 2);
    }
  }
  CHECK(flushes >= 10);
  tracer.close();
  CHECK(parse_file(path).size() == 42);
}

TEST_CASE("an event long after the last flush flushes") {
  TempDir dir;
  const std::string path = dir.file("part.json");
  Tracer tracer;
  tracer.open(path, 0, "rank 0",
              dpg::trace::Options{.flush_events = 1000, .flush_interval = std::chrono::milliseconds(20)});
  { Span span(tracer, "sample", "compute"); }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  { Span span(tracer, "sample", "compute"); }
  CHECK(parse_file(path).size() == 4);
  tracer.close();
}

TEST_CASE("threads of one peer record into one file, each with its own tid") {
  TempDir dir;
  const std::string path = dir.file("part.json");
  Tracer tracer;
  tracer.open(path, 1, "rank 1", dpg::trace::Options{.flush_events = 64});
  constexpr int threads = 4, per_thread = 2000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (int i = 0; i < per_thread; ++i) {
        Span span(tracer, "work", "compute", Args{.step = i});
        if (i % 100 == 0) tracer.counter("epsilon", i * 0.01);
      }
    });
  for (auto& t : pool) t.join();
  tracer.close();
  const json events = parse_file(path);
  std::set<int> tids;
  int work = 0;
  for (const auto& e : events)
    if (e.at("name") == "work") {
      ++work;
      tids.insert(e.at("tid").get<int>());
    }
  CHECK(work == threads * per_thread);
  CHECK(tids.size() == threads);
}

TEST_CASE("merging two parts gives one trace object; a torn part keeps its whole events") {
  TempDir dir;
  std::vector<std::string> parts;
  for (int r = 0; r < 2; ++r) {
    Tracer tracer;
    tracer.open(dir.file("part" + std::to_string(r) + ".json"), r, "rank " + std::to_string(r));
    for (int i = 0; i < 5; ++i) {
      Span span(tracer, "forward", "compute", Args{.step = i});
    }
    tracer.close();
    parts.push_back(dpg::trace::read_trace_part(dir.file("part" + std::to_string(r) + ".json")));
  }
  const json merged = json::parse(dpg::trace::merge_trace_parts(parts));
  CHECK(merged.at("displayTimeUnit") == "ms");
  const json& events = merged.at("traceEvents");
  CHECK(events.size() == 2 * (5 + 2));
  std::set<int> pids;
  for (const auto& e : events)
    if (e.at("name") == "process_name") pids.insert(e.at("pid").get<int>());
  CHECK(pids == std::set<int>{0, 1});

  // A writer killed in the middle of a write: the last event is cut and the `]` never came.
  std::string torn = parts[1];
  torn.resize(torn.rfind('}') - 5);
  const std::vector<std::string> with_torn{parts[0], torn};
  const json repaired = json::parse(dpg::trace::merge_trace_parts(with_torn));
  CHECK(repaired.at("traceEvents").size() == 7 + 6);

  const std::vector<std::string> empty{"[\n]\n", "[]"};
  CHECK(json::parse(dpg::trace::merge_trace_parts(empty)).at("traceEvents").empty());

  const std::vector<std::string> bad{parts[0], "{\"not\":\"an array\"}"};
  CHECK_THROWS_AS(dpg::trace::merge_trace_parts(bad), dpg::Error);
  const std::vector<std::string> bad_line{"[\n{\"name\":\"x\"},\n{\"name\":\n{\"name\":\"y\"}\n]"};
  CHECK_THROWS_AS(dpg::trace::merge_trace_parts(bad_line), dpg::Error);
}

TEST_CASE("a file that cannot be created or written is an error naming the path") {
  Tracer tracer;
  const std::string missing = "/nonexistent-dpg-folder/sub/trace.json";
  try {
    tracer.open(missing, 0, "rank 0");
    FAIL("open under a missing folder did not throw");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::not_found);
    CHECK(std::string(e.what()).find(missing) != std::string::npos);
  }
  CHECK_FALSE(tracer.on());

  try {
    tracer.open("/dev/full", 0, "rank 0");
    FAIL("writing /dev/full did not throw");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::unavailable);
    CHECK(std::string(e.what()).find("/dev/full") != std::string::npos);
  }
  CHECK_FALSE(tracer.on());
  tracer.close();  // nothing left to report

  try {
    dpg::trace::read_trace_part(missing);
    FAIL("reading a missing part did not throw");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::not_found);
    CHECK(std::string(e.what()).find(missing) != std::string::npos);
  }
}

TEST_CASE("a write that fails mid-run throws from the recording call and again from close") {
  TempDir dir;
  const std::string path = dir.file("part.json");
  // A file size limit makes the kernel refuse writes past 16 KiB with EFBIG.
  Tracer tracer;
  std::string message;
  {
    const dpg::trace::testing::FileSizeLimit limit(16384);
    tracer.open(path, 0, "rank 0", dpg::trace::Options{.flush_events = 16});
    for (int i = 0; i < 100000 && message.empty(); ++i) {
      try {
        tracer.complete("forward", "compute", Clock::now(), Clock::now());
      } catch (const dpg::Error& e) {
        message = e.what();
      }
    }
  }
  CHECK(message.find(path) != std::string::npos);
  CHECK_FALSE(tracer.on());
  // A Span after the failure records nothing and does not throw.
  { Span span(tracer, "forward", "compute"); }
  CHECK_THROWS_AS(tracer.close(), dpg::Error);
  tracer.close();  // reported once
  // What was written before the failure still parses.
  CHECK(parse_file(path).size() > 2);
}

TEST_CASE("cost of recording (printed, not asserted)") {
  TempDir dir;
  constexpr int n = 200000;
  Tracer off;
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    Span span(off, "forward", "compute", Args{.peer = i});
  }
  const double off_ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;

  Tracer on;
  on.open(dir.file("bench.json"), 0, "rank 0");
  const long long before = allocations();
  t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    Span span(on, "forward", "compute", Args{.peer = 1, .bytes = 4096, .op = 1, .round = i, .chunk = 0});
  }
  const double on_ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;
  const long long allocs = allocations() - before;
  on.close();
  CHECK(on.written() == n);

  // The same split in two: the recording alone (two clock reads, the lock, the copy into the
  // buffer) of 4096 spans, then the formatting and the write of those 4096 at a flush.
  Tracer split;
  constexpr int batch = 4096, batches = n / batch;
  split.open(dir.file("bench2.json"), 0, "rank 0",
             dpg::trace::Options{.flush_events = batch + 1, .flush_interval = std::chrono::hours(1)});
  Clock::duration recording{}, writing{};
  for (int b = 0; b < batches; ++b) {
    t0 = Clock::now();
    for (int i = 0; i < batch; ++i) {
      Span span(split, "forward", "compute", Args{.peer = 1, .bytes = 4096, .op = 1, .round = i, .chunk = 0});
    }
    const auto t1 = Clock::now();
    split.flush();
    recording += t1 - t0;
    writing += Clock::now() - t1;
  }
  split.close();
  const double record_ns = std::chrono::duration<double, std::nano>(recording).count() / (batch * batches);
  const double write_ns = std::chrono::duration<double, std::nano>(writing).count() / (batch * batches);
  std::printf("trace cost per span: %.1f ns on, streaming (flush every 4096 events); of which "
              "recording %.1f ns and formatting + writing %.1f ns; %.2f ns off; "
              "%lld allocations for %d spans on once warm\n",
              on_ns, record_ns, write_ns, off_ns, allocs, n);
  MESSAGE("trace cost: ", on_ns, " ns per span on, ", off_ns, " ns off");
}
