#include "runtime/core/log.h"

#include <atomic>
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

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

void set_level(Level level) { current().store(level); }
Level level() { return current().load(std::memory_order_relaxed); }

void write(Level level, const std::string& line) {
  static constexpr const char* kTags[] = {"error", "warn", "info", "debug"};
  std::lock_guard<std::mutex> lock(sink_mutex());
  std::cerr << "[" << kTags[static_cast<int>(level)] << "] " << line << '\n';
}

}  // namespace dpg::log
