#include <doctest/doctest.h>

#include "runtime/data/readers.h"
#include "tests/unit/data/data_test_util.h"

using namespace dpg::data;
using namespace dpg::data::testing;
using dpg::Code;

namespace {

int pixel(std::uint32_t i, std::uint32_t p) { return static_cast<int>((i * 7 + p * 3) % 256); }

}  // namespace

TEST_CASE("idx: gzip and plain files give the same data, pixels scaled to [0, 1]") {
  TempFolder t("idx_ok");
  const Bytes images = idx_images(3, 2, 2, pixel);
  const Bytes labels = idx_labels({0, 9, 4});
  write_gz(t.file("img.gz"), images);
  write_gz(t.file("lab.gz"), labels);
  write_bytes(t.file("img"), images);
  write_bytes(t.file("lab"), labels);
  const Dataset a = read_idx(t.file("img.gz"), t.file("lab.gz"), 10);
  const Dataset b = read_idx(t.file("img"), t.file("lab"), 10);
  CHECK(a.rows == 3);
  CHECK(a.cols == 4);
  CHECK(a.num_classes == 10);
  CHECK(a.labels == std::vector<std::int32_t>{0, 9, 4});
  REQUIRE(a.features.size() == 12);
  CHECK(a.features[5] == doctest::Approx(pixel(1, 1) / 255.0));
  CHECK(a.features == b.features);
  CHECK(a.labels == b.labels);
}

TEST_CASE("idx: bad magic names the file and both magics in hex") {
  TempFolder t("idx_magic");
  write_gz(t.file("img.gz"), idx_labels({1, 2}));  // a label file where images belong
  write_gz(t.file("lab.gz"), idx_labels({1, 2}));
  Code code{};
  const std::string msg =
      error_of([&] { read_idx(t.file("img.gz"), t.file("lab.gz"), 10); }, &code);
  CHECK(code == Code::invalid_argument);
  CHECK(contains(msg, t.file("img.gz")));
  CHECK(contains(msg, "expected 0x00000803"));
  CHECK(contains(msg, "got 0x00000801"));
}

TEST_CASE("idx: truncated data, header and gzip stream are data_loss naming the file") {
  TempFolder t("idx_trunc");
  write_gz(t.file("lab.gz"), idx_labels({1, 2, 3}));
  Bytes images = idx_images(3, 2, 2, pixel);
  images.resize(images.size() - 5);
  write_gz(t.file("img.gz"), images);
  Code code{};
  std::string msg = error_of([&] { read_idx(t.file("img.gz"), t.file("lab.gz"), 10); }, &code);
  CHECK(code == Code::data_loss);
  CHECK(contains(msg, t.file("img.gz")));
  CHECK(contains(msg, "truncated"));
  CHECK(contains(msg, "3x2x2"));

  write_bytes(t.file("short"), Bytes{0, 0, 8, 3, 0, 0});  // magic fine, header cut
  msg = error_of([&] { read_idx(t.file("short"), t.file("lab.gz"), 10); }, &code);
  CHECK(code == Code::data_loss);
  CHECK(contains(msg, t.file("short")));
  CHECK(contains(msg, "truncated"));

  write_gz(t.file("full.gz"), idx_images(50, 8, 8, pixel));
  Bytes gz = read_bytes(t.file("full.gz"));
  gz.resize(gz.size() / 2);
  write_bytes(t.file("cut.gz"), gz);
  msg = error_of([&] { read_idx(t.file("cut.gz"), t.file("lab.gz"), 10); }, &code);
  CHECK(code == Code::data_loss);
  CHECK(contains(msg, t.file("cut.gz")));
}

TEST_CASE("idx: trailing bytes, count mismatch, label range, empty and missing files") {
  TempFolder t("idx_errors");
  write_gz(t.file("img.gz"), idx_images(3, 2, 2, pixel));
  Bytes longer = idx_images(3, 2, 2, pixel);
  longer.push_back(1);
  write_gz(t.file("long.gz"), longer);
  write_gz(t.file("lab2.gz"), idx_labels({1, 2}));
  write_gz(t.file("lab_big.gz"), idx_labels({1, 10, 2}));
  write_bytes(t.file("empty"), {});
  write_gz(t.file("lab3.gz"), idx_labels({1, 2, 3}));
  Code code{};

  std::string msg = error_of([&] { read_idx(t.file("long.gz"), t.file("lab3.gz"), 10); }, &code);
  CHECK(code == Code::data_loss);
  CHECK(contains(msg, t.file("long.gz")));

  msg = error_of([&] { read_idx(t.file("img.gz"), t.file("lab2.gz"), 10); }, &code);
  CHECK(code == Code::invalid_argument);
  CHECK(contains(msg, t.file("img.gz")));
  CHECK(contains(msg, t.file("lab2.gz")));
  CHECK(contains(msg, "3 images"));
  CHECK(contains(msg, "2 labels"));

  msg = error_of([&] { read_idx(t.file("img.gz"), t.file("lab_big.gz"), 10); }, &code);
  CHECK(code == Code::invalid_argument);
  CHECK(contains(msg, t.file("lab_big.gz")));
  CHECK(contains(msg, "label 10 of record 1"));
  CHECK_NOTHROW(read_idx(t.file("img.gz"), t.file("lab_big.gz"), 11));

  msg = error_of([&] { read_idx(t.file("empty"), t.file("lab3.gz"), 10); }, &code);
  CHECK(contains(msg, t.file("empty")));
  CHECK(contains(msg, "empty"));

  msg = error_of([&] { read_idx(t.file("nope.gz"), t.file("lab3.gz"), 10); }, &code);
  CHECK(code == Code::not_found);
  CHECK(contains(msg, t.file("nope.gz")));
}

TEST_CASE("csv: header skipped, blank lines and CRLF accepted, label column anywhere") {
  TempFolder t("csv_ok");
  write_text(t.file("a.csv"), "f1,label,f2\r\n0.5,2,-1\r\n\r\n1e2, 0 ,+3\r\n");
  const Dataset d = read_csv(t.file("a.csv"), 1, 0);
  CHECK(d.rows == 2);
  CHECK(d.cols == 2);
  CHECK(d.num_classes == 3);  // inferred: largest label + 1
  CHECK(d.labels == std::vector<std::int32_t>{2, 0});
  CHECK(d.features == std::vector<float>{0.5f, -1.0f, 100.0f, 3.0f});

  write_text(t.file("b.csv"), "1,0.25\n3.0,0.5\n");  // no header; "3.0" is an integer label
  const Dataset b = read_csv(t.file("b.csv"), 0, 7);
  CHECK(b.rows == 2);
  CHECK(b.num_classes == 7);
  CHECK(b.labels == std::vector<std::int32_t>{1, 3});
}

TEST_CASE("csv: every error names file and line (and column for cells)") {
  TempFolder t("csv_errors");
  Code code{};
  auto check = [&](const std::string& name, const std::string& text, const std::string& where,
                   const std::string& what, int num_classes = 0) {
    write_text(t.file(name), text);
    const std::string msg = error_of([&] { read_csv(t.file(name), 0, num_classes); }, &code);
    CHECK_MESSAGE(contains(msg, t.file(name) + where), msg);
    CHECK_MESSAGE(contains(msg, what), msg);
    CHECK(code == Code::invalid_argument);
  };
  check("cols.csv", "label,a,b\n1,2,3\n1,2\n", ":3", "expected 3 columns, got 2");
  check("cell.csv", "1,2,3\n0,x,3\n", ":2:2", "not a finite number: 'x'");
  check("nan.csv", "1,2,3\n0,2,nan\n", ":2:3", "not a finite number");
  check("empty_cell.csv", "1,2,3\n0,,3\n", ":2:2", "not a finite number");
  check("neg.csv", "1,2\n-1,2\n", ":2", "label '-1'");
  check("frac.csv", "1,2\n2.5,2\n", ":2", "not a non-negative integer");
  check("range.csv", "1,2\n9,2\n", ":2", "label 9 is out of range (num_classes 5)", 5);
  check("empty.csv", "", "", "empty file");
  check("header_only.csv", "label,a\n", "", "empty file");
  check("one_col.csv", "1\n2\n", ":1", "at least one feature");

  write_text(t.file("lc.csv"), "1,2\n");
  const std::string msg = error_of([&] { read_csv(t.file("lc.csv"), 4, 0); }, &code);
  CHECK(contains(msg, t.file("lc.csv") + ":1"));
  CHECK(contains(msg, "label column 4"));
  CHECK(error_of([&] { read_csv(t.file("missing.csv"), 0, 0); }, &code).find("missing.csv") !=
        std::string::npos);
  CHECK(code == Code::not_found);
}
