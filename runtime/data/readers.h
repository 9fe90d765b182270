// Readers for the two input formats. Both return raw (un-normalised) data; every error names
// the file and, where there is one, the line, column or record at fault.
#pragma once

#include <string>

#include "runtime/data/dataset.h"

namespace dpg::data {

inline constexpr std::uint32_t kIdxImagesMagic = 0x00000803;  // uint8, 3 dimensions
inline constexpr std::uint32_t kIdxLabelsMagic = 0x00000801;  // uint8, 1 dimension

// An IDX image file and its label file (gzip or plain). Features are pixel / 255, so in [0, 1].
// Labels must be < num_classes (> 0).
Dataset read_idx(const std::string& images_path, const std::string& labels_path, int num_classes);

// A CSV file: one row per example, the label in column `label_column` (0-based), every other
// column a numeric feature. A first row whose label cell is not a number is a header and skipped;
// blank lines are skipped. num_classes 0: inferred as the largest label + 1, refused when that
// exceeds both kMaxInferredClasses and the number of rows (give num_classes then).
inline constexpr std::size_t kMaxInferredClasses = 1024;
Dataset read_csv(const std::string& path, int label_column, int num_classes);

}  // namespace dpg::data
