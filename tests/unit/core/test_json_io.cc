#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "runtime/core/error.h"
#include "runtime/core/json_io.h"

namespace fs = std::filesystem;

TEST_CASE("json_io: errors name the file and the JSON path") {
  const fs::path dir = fs::temp_directory_path() / "dpg_test_json_io";
  fs::create_directories(dir);
  const std::string bad = (dir / "bad.json").string();
  { std::ofstream(bad) << "{ \"a\": 1, "; }
  try {
    dpg::read_json_file(bad);
    FAIL("expected an error");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::invalid_argument);
    CHECK(std::string(e.what()).find("bad.json") != std::string::npos);
  }
  CHECK_THROWS_AS(dpg::read_json_file((dir / "missing.json").string()), dpg::Error);

  const dpg::Json j = {{"epochs", "ten"}, {"lr", 0.1}};
  dpg::JsonReader r(j, "cfg.json:");
  CHECK(r.number("lr") == doctest::Approx(0.1));
  try {
    r.integer("epochs");
    FAIL("expected an error");
  } catch (const dpg::Error& e) {
    CHECK(std::string(e.what()).find("cfg.json:/epochs") != std::string::npos);
  }
  CHECK_THROWS_AS(r.reject_unknown({"lr"}), dpg::Error);
  CHECK_NOTHROW(r.reject_unknown({"lr", "epochs"}));
  fs::remove_all(dir);
}

TEST_CASE("json_io: atomic write replaces the file and leaves no temporary behind") {
  const fs::path dir = fs::temp_directory_path() / "dpg_test_atomic";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "out.txt").string();
  dpg::write_file_atomic(path, "first");
  dpg::write_file_atomic(path, "second");
  std::ifstream in(path);
  std::string s;
  in >> s;
  CHECK(s == "second");
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) { (void)e; ++files; }
  CHECK(files == 1);
  CHECK_THROWS_AS(dpg::write_file_atomic((dir / "no" / "such" / "dir.txt").string(), "x"),
                  dpg::Error);
  fs::remove_all(dir);
}

TEST_CASE("json_io: parse_json_text has read_json_file's checks") {
  CHECK(dpg::parse_json_text("{\"a\": [1, {\"b\": 2}]}", "t")["a"][1]["b"] == 2);
  try {
    dpg::parse_json_text("{\"a\": 1, \"a\": 2}", "t.json");
    FAIL("expected an error");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::invalid_argument);
    CHECK(std::string(e.what()).find("t.json: the key \"a\" appears twice") != std::string::npos);
  }
  // The same key in two different objects is fine.
  CHECK_NOTHROW(dpg::parse_json_text("{\"a\": {\"x\": 1}, \"b\": {\"x\": 2}}", "t"));
  try {
    dpg::parse_json_text("{\"a\": 1,", "t.json");
    FAIL("expected an error");
  } catch (const dpg::Error& e) {
    CHECK(std::string(e.what()).find("t.json: not valid JSON") != std::string::npos);
  }
}

TEST_CASE("json_io: a number too large for a double is invalid_argument naming the file") {
  // Found by tests/fuzz/fuzz_train_config: nlohmann throws out_of_range (406), not parse_error,
  // and it escaped read_json_file as an exception that names no file.
  for (const char* text : {"{\"epochs\": 1e400}", "[-1e999]", "88888884E44444444"}) {
    CAPTURE(text);
    try {
      dpg::parse_json_text(text, "cfg.json");
      FAIL("expected an error");
    } catch (const dpg::Error& e) {
      CHECK(e.code() == dpg::Code::invalid_argument);
      CHECK(std::string(e.what()).find("cfg.json: not valid JSON") != std::string::npos);
    }
  }
  const fs::path dir = fs::temp_directory_path() / "dpg_test_json_overflow";
  fs::create_directories(dir);
  const std::string path = (dir / "big.json").string();
  { std::ofstream(path) << "{\"lr\": 1e400}"; }
  CHECK_THROWS_AS(dpg::read_json_file(path), dpg::Error);
  fs::remove_all(dir);
}

TEST_CASE("json_io: a device or FIFO is never replaced by an output, and stays as it was") {
  const fs::path dir = fs::temp_directory_path() / ("dpg_test_special_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string fifo = (dir / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  try {
    dpg::write_file_atomic(fifo, "x");
    FAIL("expected an error");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::failed_precondition);
    CHECK(std::string(e.what()).find(fifo + ": is not a regular file") != std::string::npos);
  }
  CHECK(fs::is_fifo(fifo));
  const std::string folder = (dir / "folder").string();
  fs::create_directories(folder);
  CHECK_THROWS_AS(dpg::write_file_atomic(folder, "x"), dpg::Error);
  CHECK(fs::is_directory(folder));
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) { (void)e; ++entries; }
  CHECK(entries == 2);  // no temporary left beside them
  fs::remove_all(dir);
}

TEST_CASE("json_io: a folder, or an input without end, is an error naming the file") {
  const std::string folder = fs::temp_directory_path().string();
  try {
    dpg::read_json_file(folder);
    FAIL("expected an error");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::invalid_argument);
    CHECK(std::string(e.what()).rfind(folder + ": is a folder, not a JSON file", 0) == 0);
  }
  // /dev/zero never ends, a FIFO without a writer would block open(): both refused before any
  // read, by their kind.
  try {
    dpg::read_json_file("/dev/zero");
    FAIL("expected an error");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::invalid_argument);
    CHECK(std::string(e.what()).rfind("/dev/zero: is a character device, not a JSON file", 0) ==
          0);
  }
  const fs::path dir = fs::temp_directory_path() / ("dpg_kinds_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string fifo = (dir / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  try {
    dpg::read_json_file(fifo);
    FAIL("expected an error");
  } catch (const dpg::Error& e) {
    CHECK(std::string(e.what()).rfind(fifo + ": is a FIFO, not a JSON file", 0) == 0);
  }
  // A regular file past the bound is refused by its size, before it is read.
  const std::string big = (dir / "big").string();
  std::ofstream(big) << std::string(100, 'x');
  try {
    dpg::read_regular_file(big, 50, "a test input");
    FAIL("expected an error");
  } catch (const dpg::Error& e) {
    CHECK(std::string(e.what()).rfind(big + ": longer than 50 bytes", 0) ==
          0);
  }
  CHECK(dpg::read_regular_file(big, 100, "a test input") == std::string(100, 'x'));
  fs::remove_all(dir);
}

TEST_CASE("json_io: nesting past kMaxJsonDepth is refused naming the input; a quote is cut short") {
  const auto nested = [](int depth, const std::string& inner) {
    return "{\"lr\": " + std::string(static_cast<std::size_t>(depth), '[') + inner +
           std::string(static_cast<std::size_t>(depth), ']') + "}";
  };
  // The object is level 0: kMaxJsonDepth - 1 arrays inside it still parse, one more does not.
  CHECK_NOTHROW(dpg::parse_json_text(nested(dpg::kMaxJsonDepth - 1, "1"), "c.json"));
  CHECK_THROWS_WITH_AS(dpg::parse_json_text(nested(dpg::kMaxJsonDepth, "1"), "c.json"),
                       "c.json: nested more than 64 levels deep, the most a JSON input may be",
                       dpg::Error);
  // A few hundred thousand brackets (what crashed the error report before the bound).
  CHECK_THROWS_WITH_AS(dpg::parse_json_text(nested(300000, ""), "c.json"),
                       doctest::Contains("nested more than 64 levels"), dpg::Error);
  const dpg::Json long_value = std::string(1 << 20, 'x');
  const std::string q = dpg::quote(long_value);
  CHECK(q.size() < 100);
  CHECK(q.rfind("\"xxxx", 0) == 0);
}
