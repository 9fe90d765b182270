#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/core/bounds.h"
#include "runtime/core/error.h"
#include "runtime/data/io.h"
#include "runtime/data/readers.h"

namespace dpg::data {
namespace {

std::string hex32(std::uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(8) << std::setfill('0') << v;
  return os.str();
}

struct IdxFile {
  std::vector<unsigned char> bytes;
  std::vector<std::uint64_t> dims;
  std::size_t data_offset = 0;
};

// Reads an IDX file and checks its magic and that it holds exactly the bytes its header promises.
// The header is read first; its product of dimensions is formed with checked arithmetic, and the
// rest of the file is read only up to one byte past what that product promises.
IdxFile read_idx_file(const std::string& path, std::uint32_t magic, const char* kind) {
  IdxFile f;
  const std::size_t ndims = magic & 0xffu;
  const std::size_t header_bytes = 4 + 4 * ndims;
  const std::vector<unsigned char> head = read_file_prefix(path, header_bytes);
  std::size_t size = head.size();
  if (size == 0) fail(Code::invalid_argument, path + ": empty file (expected IDX " + kind + ")");
  if (size < 4) {
    fail(Code::data_loss, path + ": truncated: " + std::to_string(size) +
                              " bytes, shorter than the 4-byte IDX magic");
  }
  const std::uint32_t got = get_be32(head.data());
  if (got != magic) {
    fail(Code::invalid_argument,
         path + ": bad magic: expected " + hex32(magic) + " (IDX " + kind + "), got " + hex32(got));
  }
  f.data_offset = header_bytes;
  if (size < f.data_offset) {
    fail(Code::data_loss, path + ": truncated: the IDX header needs " +
                              std::to_string(f.data_offset) + " bytes, the file has " +
                              std::to_string(size));
  }
  std::uint64_t expected = 1;
  std::string shape;
  for (std::size_t d = 0; d < ndims; ++d) {
    const std::uint64_t dim = get_be32(head.data() + 4 + 4 * d);
    f.dims.push_back(dim);
    if (d > 0) shape += 'x';
    shape += std::to_string(dim);
  }
  for (std::uint64_t dim : f.dims) {
    const auto next = checked_mul(expected, dim);
    if (!next) {
      fail(Code::data_loss, path + ": the IDX dimensions " + shape +
                                " overflow 64 bits: a corrupt or hostile header");
    }
    expected = *next;
  }
  const std::uint64_t total = sum_or_fail(expected, f.data_offset, path, "the IDX data size");
  f.bytes = read_file_bytes(path, total,
                            "that its IDX header (" + shape + ") promises: unexpected bytes "
                            "after the data");
  size = f.bytes.size();
  const std::uint64_t present = size - f.data_offset;
  if (present < expected) {
    fail(Code::data_loss, path + ": truncated: the header promises " + shape + " (" +
                              std::to_string(expected) + " bytes of data), only " +
                              std::to_string(present) + " are present");
  }
  return f;
}

}  // namespace

Dataset read_idx(const std::string& images_path, const std::string& labels_path, int num_classes) {
  if (num_classes <= 0) {
    fail(Code::invalid_argument,
         "num_classes must be positive, got " + std::to_string(num_classes));
  }
  const IdxFile images = read_idx_file(images_path, kIdxImagesMagic, "images");
  const IdxFile labels = read_idx_file(labels_path, kIdxLabelsMagic, "labels");
  const std::uint64_t n = images.dims[0];
  if (labels.dims[0] != n) {
    fail(Code::invalid_argument, images_path + " holds " + std::to_string(n) + " images but " +
                                     labels_path + " holds " + std::to_string(labels.dims[0]) +
                                     " labels");
  }
  if (n == 0) fail(Code::invalid_argument, images_path + ": holds no images");
  if (images.dims[1] == 0 || images.dims[2] == 0) {
    fail(Code::invalid_argument, images_path + ": images have zero pixels");
  }

  Dataset d;
  d.rows = n;
  d.cols = images.dims[1] * images.dims[2];
  d.num_classes = num_classes;
  d.labels.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const int label = labels.bytes[labels.data_offset + i];
    if (label >= num_classes) {
      fail(Code::invalid_argument,
           labels_path + ": label " + std::to_string(label) + " of record " + std::to_string(i) +
               " is out of range (num_classes " + std::to_string(num_classes) + ")");
    }
    d.labels[i] = label;
  }
  const std::size_t count = d.rows * d.cols;  // at most the file's bytes: no overflow
  require_memory(count * sizeof(float), images_path + ": the features of " + std::to_string(n) +
                                            " images");
  d.features.resize(count);
  const unsigned char* pixels = images.bytes.data() + images.data_offset;
  constexpr float kScale = 1.0f / 255.0f;
  for (std::size_t i = 0; i < count; ++i) d.features[i] = static_cast<float>(pixels[i]) * kScale;
  return d;
}

}  // namespace dpg::data
