#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

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
