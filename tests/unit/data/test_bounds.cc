// Sizes from outside the process: a header whose product wraps, a compressed file that inflates
// past its header, a CSV whose one large label would make billions of classes, a manifest whose
// rows x cols overflow. Each must be an error naming the file, before memory grows.
#include <doctest/doctest.h>

#include "runtime/data/readers.h"
#include "runtime/data/shard.h"
#include "tests/unit/data/data_test_util.h"

using namespace dpg::data;
using namespace dpg::data::testing;
using dpg::Code;

TEST_CASE("bounds: an IDX header whose dimensions wrap 64 bits is refused, naming the file") {
  TempFolder t("bounds_wrap");
  // 2^22 x 2^21 x 2^21 = 2^64: wraps to 0, which a 16-byte file "holds" exactly.
  Bytes images;
  put_be32(images, 0x00000803);
  put_be32(images, 1u << 22);
  put_be32(images, 1u << 21);
  put_be32(images, 1u << 21);
  write_bytes(t.file("img"), images);
  Bytes labels;
  put_be32(labels, 0x00000801);
  put_be32(labels, 1u << 22);
  labels.resize(labels.size() + (1u << 22), 0);
  write_gz(t.file("lab.gz"), labels);
  Code code{};
  const std::string msg = error_of([&] { read_idx(t.file("img"), t.file("lab.gz"), 10); }, &code);
  CHECK(code == Code::data_loss);
  CHECK(contains(msg, t.file("img")));
  CHECK(contains(msg, "overflow"));
}

TEST_CASE("bounds: a gzip IDX file that inflates past its header stops one byte past it") {
  TempFolder t("bounds_bomb");
  Bytes images = idx_images(1, 2, 2, [](std::uint32_t, std::uint32_t) { return 1; });
  images.resize(images.size() + (64u << 20), 0);  // 64 MiB of zeros: about 64 KiB compressed
  write_gz(t.file("img.gz"), images);
  write_gz(t.file("lab.gz"), idx_labels({1}));
  Code code{};
  const std::string msg =
      error_of([&] { read_idx(t.file("img.gz"), t.file("lab.gz"), 10); }, &code);
  CHECK(code == Code::data_loss);
  CHECK(contains(msg, t.file("img.gz")));
  CHECK(contains(msg, "inflates to) more than the 20 bytes"));
}

TEST_CASE("bounds: a CSV whose largest label would make far more classes than rows is refused") {
  TempFolder t("bounds_label");
  std::string text;
  for (int i = 0; i < 20; ++i) text += std::to_string(i % 3) + ",0.5,0.25\n";
  text += "2000000000,0.5,0.25\n";
  write_text(t.file("big.csv"), text);
  Code code{};
  const std::string msg = error_of([&] { read_csv(t.file("big.csv"), 0, 0); }, &code);
  CHECK(code == Code::invalid_argument);
  CHECK(contains(msg, t.file("big.csv")));
  CHECK(contains(msg, "--num-classes"));
  // Given explicitly, the count is the user's: the label is then checked against it.
  const std::string given = error_of([&] { read_csv(t.file("big.csv"), 0, 10); });
  CHECK(contains(given, "out of range"));
  // Inference is fine while the classes stay few.
  write_text(t.file("ok.csv"), "0,1\n9,2\n");
  CHECK(read_csv(t.file("ok.csv"), 0, 0).num_classes == 10);
}

TEST_CASE("bounds: a manifest whose rows x cols overflow is data_loss naming the shard") {
  TempFolder t("bounds_shard");
  write_bytes(t.file("shard.bin"), Bytes(64, 0));
  ShardExpectation e;
  e.rows = std::size_t{1} << 40;
  e.cols = std::size_t{1} << 40;
  e.num_classes = 10;
  Code code{};
  const std::string msg = error_of([&] { read_shard(t.file("shard.bin"), e); }, &code);
  CHECK(code == Code::data_loss);
  CHECK(contains(msg, t.file("shard.bin")));
  CHECK(contains(msg, "overflow"));
}
