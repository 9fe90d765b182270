// The CSV reader. Input: byte 0 sets the label column (0..3) and, in its upper bits, num_classes
// (0 = inferred, else 1..63); the rest is the file, written to a scratch file (read_csv takes a
// path).
#include <cstdint>
#include <cstdlib>

#include "runtime/data/readers.h"
#include "tests/fuzz/fuzz_util.h"

// read_csv reads up to a quarter of the available memory, in steps of up to 4 MiB that are
// zero-filled when allocated: ~40 ms per input under ASan. DPGOSSIP_MEMORY_BYTES (the documented
// test figure) of 256 KiB caps the read at 64 KiB, far above libFuzzer's input sizes (4 KiB).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("DPGOSSIP_MEMORY_BYTES", "262144", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int label_column = data[0] & 3;
  const int num_classes = data[0] >> 2;
  const std::string path = dpg::fuzz::write_scratch("data.csv", data + 1, size - 1);
  return dpg::fuzz::run([&] { (void)dpg::data::read_csv(path, label_column, num_classes); });
}
