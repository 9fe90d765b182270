// The IDX reader. Input: byte 0 sets num_classes (1..256); bytes 1..4 (little-endian) are the
// length of the images file, which follows; the rest is the labels file. Both go through files,
// as read_idx takes paths (plain or gzip).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "runtime/data/readers.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  const int num_classes = static_cast<int>(data[0]) + 1;
  uint32_t images_len = 0;
  std::memcpy(&images_len, data + 1, 4);
  data += 5;
  size -= 5;
  const size_t n = std::min<size_t>(images_len, size);
  const std::string images = dpg::fuzz::write_scratch("images.idx", data, n);
  const std::string labels = dpg::fuzz::write_scratch("labels.idx", data + n, size - n);
  return dpg::fuzz::run([&] { (void)dpg::data::read_idx(images, labels, num_classes); });
}
