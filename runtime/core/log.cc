#include "runtime/core/log.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string_view>

namespace dpg::log {
namespace {

Level initial_level() {
  const char* env = std::getenv("DPG_LOG");
  if (env == nullptr) return Level::info;
  const std::string_view v(env);
  if (v == "error") return Level::error;
  if (v == "warn") return Level::warn;
  if (v == "debug") return Level::debug;
  return Level::info;
}

std::atomic<Level>& current() {
  static std::atomic<Level> level{initial_level()};
  return level;
}

thread_local int thread_rank = -1;

struct Origin {
  std::mutex mu;
  std::string host;
  int rank = -1;
};
Origin& process_origin() {
  static Origin o;
  return o;
}

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

void set_level(Level level) { current().store(level); }
Level level() { return current().load(std::memory_order_relaxed); }

void write(Level level, const std::string& line) {
  static constexpr const char* kTags[] = {"error", "warn", "info", "debug"};
  const std::string who = origin();
  std::lock_guard<std::mutex> lock(sink_mutex());
  std::cerr << "[" << kTags[static_cast<int>(level)] << "] " << who << line << '\n';
}

void set_origin(int rank) {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') std::strcpy(name, "localhost");
  Origin& o = process_origin();
  std::lock_guard lock(o.mu);
  o.host = name;
  o.rank = rank;
}

RankScope::RankScope(int rank) : previous_(thread_rank) { thread_rank = rank; }
RankScope::~RankScope() { thread_rank = previous_; }

std::string origin() {
  Origin& o = process_origin();
  std::string host;
  int rank = thread_rank;
  {
    std::lock_guard lock(o.mu);
    host = o.host;
    if (rank < 0) rank = o.rank;
  }
  std::string out;
  if (!host.empty()) out = host + " pid " + std::to_string(::getpid());
  if (rank >= 0) out += (out.empty() ? "" : " ") + std::string("rank ") + std::to_string(rank);
  return out.empty() ? out : out + ": ";
}

}  // namespace dpg::log
