#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/core/bounds.h"
#include "runtime/core/error.h"
#include "runtime/core/json_io.h"
#include "runtime/core/train_config.h"

namespace {

std::string error_of(const auto& f) {
  try {
    f();
  } catch (const dpg::Error& e) {
    return e.what();
  }
  FAIL("expected a dpg::Error");
  return {};
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("bounds: checked arithmetic fails on overflow, naming the file and the field") {
  CHECK(dpg::checked_mul(1ull << 32, 1ull << 31).value() == 1ull << 63);
  CHECK_FALSE(dpg::checked_mul(1ull << 32, 1ull << 32).has_value());
  CHECK_FALSE(dpg::checked_add(UINT64_MAX, 1).has_value());
  CHECK(dpg::product_or_fail({2, 3, 4}, "f", "x") == 24);
  const std::string msg =
      error_of([] { dpg::product_or_fail({1ull << 22, 1ull << 21, 1ull << 21}, "img", "dims"); });
  CHECK(has(msg, "img: dims overflows 64 bits"));
  CHECK(dpg::shorten(std::string(500, 'x')).size() < 70);
}

TEST_CASE("bounds: require_memory refuses with both figures") {
  ::setenv("DPGOSSIP_MEMORY_BYTES", "1000000", 1);
  CHECK(dpg::available_memory_bytes() == 1000000);
  const std::string msg = error_of([] { dpg::require_memory(5000000, "a model", "lower --hidden"); });
  ::unsetenv("DPGOSSIP_MEMORY_BYTES");
  CHECK(has(msg, "a model needs about 5000000 bytes"));
  CHECK(has(msg, "1000000 bytes"));
  CHECK(has(msg, "lower --hidden"));
  CHECK_NOTHROW(dpg::require_memory(1, "one byte"));
}

TEST_CASE("bounds: a JSON file with a duplicate key is an error naming the key") {
  const auto path = (std::filesystem::temp_directory_path() /
                     ("dpg_dup_" + std::to_string(::getpid()) + ".json"))
                        .string();
  std::ofstream(path) << R"({"epochs": 1, "nested": {"a": 1, "b": 2}, "epochs": 2})";
  const std::string msg = error_of([&] { dpg::read_json_file(path); });
  CHECK(has(msg, path));
  CHECK(has(msg, "\"epochs\" appears twice"));
  // The same key in two different objects is fine.
  std::ofstream(path) << R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 2}]})";
  CHECK_NOTHROW(dpg::read_json_file(path));
  std::filesystem::remove(path);
}

TEST_CASE("bounds: config numbers that would overflow a duration or a step count are refused") {
  auto parse = [](const std::string& key, const std::string& text) {
    dpg::TrainConfig c;
    for (const auto& f : dpg::config_fields()) {
      if (f.key == key) f.parse(c, text);
    }
    dpg::validate(c);
  };
  CHECK(has(error_of([&] { parse("epochs", "1e300"); }), "/epochs: must be in (0, 1000000]"));
  CHECK(has(error_of([&] { parse("timeout_s", "1e300"); }), "/timeout_s: must be in (0, 1000000]"));
  CHECK(has(error_of([&] { parse("batch_size", "1e20"); }), "/batch_size"));
  CHECK(has(error_of([&] { parse("hidden", "2000000000"); }), "/hidden"));
  CHECK(has(error_of([&] { parse("lr", "inf"); }), "/lr"));
  CHECK(has(error_of([&] { parse("topology_schedule", "step:1e300=ring"); }), "at most"));
  // A long bad value is quoted shortened.
  const std::string msg = error_of([&] { parse("epochs", std::string(5000, '9') + "x"); });
  CHECK(msg.size() < 200);
  CHECK_NOTHROW(parse("epochs", "1000000"));
}
