#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/bounds.h"
#include "runtime/core/error.h"
#include "runtime/data/io.h"
#include "runtime/data/readers.h"

namespace dpg::data {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// A finite number, or false. Accepts a leading '+', which from_chars does not.
template <typename T>
bool parse_number(std::string_view cell, T& out) {
  cell = trim(cell);
  if (!cell.empty() && cell.front() == '+') cell.remove_prefix(1);
  if (cell.empty()) return false;
  const auto [ptr, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), out);
  return ec == std::errc{} && ptr == cell.data() + cell.size() && std::isfinite(out);
}

void split(std::string_view line, std::vector<std::string_view>& cells) {
  cells.clear();
  for (;;) {
    const std::size_t comma = line.find(',');
    cells.push_back(line.substr(0, comma));
    if (comma == std::string_view::npos) return;
    line.remove_prefix(comma + 1);
  }
}

// Parses CSV text into `out` row by row, with the position of every error.
class CsvParser {
 public:
  CsvParser(const std::string& path, int label_column, int num_classes, Dataset& out)
      : path_(path), label_column_(label_column), num_classes_(num_classes), out_(out) {}

  void line(std::string_view text, std::size_t line_no) {
    if (trim(text).empty()) return;
    split(text, cells_);
    const bool first = expected_cells_ == 0;
    if (first) {
      if (cells_.size() < 2) {
        fail(Code::invalid_argument, where(line_no) +
                                         ": expected a label and at least one "
                                         "feature column, got " +
                                         std::to_string(cells_.size()) + " column(s)");
      }
      if (static_cast<std::size_t>(label_column_) >= cells_.size()) {
        fail(Code::invalid_argument,
             where(line_no) + ": label column " + std::to_string(label_column_) +
                 " (0-based) but the row has " + std::to_string(cells_.size()) + " columns");
      }
      expected_cells_ = cells_.size();
      out_.cols = expected_cells_ - 1;
      double ignored = 0;
      if (!parse_number(cells_[label_column_], ignored)) return;  // a header row
    }
    if (cells_.size() != expected_cells_) {
      fail(Code::invalid_argument, where(line_no) + ": expected " +
                                       std::to_string(expected_cells_) + " columns, got " +
                                       std::to_string(cells_.size()));
    }
    for (std::size_t c = 0; c < cells_.size(); ++c) {
      if (c == static_cast<std::size_t>(label_column_)) {
        out_.labels.push_back(label(cells_[c], line_no));
        continue;
      }
      float value = 0;
      if (!parse_number(cells_[c], value)) {
        fail(Code::invalid_argument, where(line_no) + ":" + std::to_string(c + 1) +
                                         ": not a finite number: '" + std::string(trim(cells_[c])) +
                                         "'");
      }
      out_.features.push_back(value);
    }
    ++out_.rows;
  }

  int max_label() const { return max_label_; }

 private:
  std::string where(std::size_t line_no) const { return path_ + ":" + std::to_string(line_no); }

  std::int32_t label(std::string_view cell, std::size_t line_no) {
    double value = 0;
    const bool ok = parse_number(cell, value) && value >= 0 && std::floor(value) == value &&
                    value <= std::numeric_limits<std::int32_t>::max();
    if (!ok) {
      fail(Code::invalid_argument, where(line_no) + ": label '" + std::string(trim(cell)) +
                                       "' (column " + std::to_string(label_column_ + 1) +
                                       ") is not a non-negative integer");
    }
    const auto v = static_cast<std::int32_t>(value);
    if (num_classes_ > 0 && v >= num_classes_) {
      fail(Code::invalid_argument, where(line_no) + ": label " + std::to_string(v) +
                                       " is out of range (num_classes " +
                                       std::to_string(num_classes_) + ")");
    }
    if (v > max_label_) max_label_ = v;
    return v;
  }

  const std::string& path_;
  const int label_column_;
  const int num_classes_;
  Dataset& out_;
  std::size_t expected_cells_ = 0;
  int max_label_ = -1;
  std::vector<std::string_view> cells_;
};

}  // namespace

Dataset read_csv(const std::string& path, int label_column, int num_classes) {
  if (label_column < 0) {
    fail(Code::invalid_argument, "label column must be >= 0, got " + std::to_string(label_column));
  }
  if (num_classes < 0) {
    fail(Code::invalid_argument, "num_classes must be >= 0, got " + std::to_string(num_classes));
  }
  // Parsed, every byte of text costs at most about 2 of features (a one-digit cell and its comma
  // become a 4-byte float), so a quarter of the free memory bounds what is read.
  const std::uint64_t limit = available_memory_bytes() / 4;
  const std::vector<unsigned char> bytes =
      read_file_bytes(path, limit, "that fit in a quarter of the available memory");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());

  Dataset d;
  CsvParser parser(path, label_column, num_classes, d);
  std::size_t line_no = 1;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    parser.line(text.substr(start, end - start), line_no);
    start = end + 1;
    ++line_no;
  }
  if (d.rows == 0) fail(Code::invalid_argument, path + ": empty file (no data rows)");
  d.num_classes = num_classes > 0 ? num_classes : parser.max_label() + 1;
  // The number of classes sets the output layer's size: inferred from one large label, it would
  // cost memory out of all proportion to the file. Past this many, the user says so.
  if (num_classes == 0 && static_cast<std::size_t>(d.num_classes) > kMaxInferredClasses &&
      static_cast<std::size_t>(d.num_classes) > d.rows) {
    fail(Code::invalid_argument,
         path + ": the largest label, " + std::to_string(parser.max_label()) + ", would make " +
             std::to_string(d.num_classes) + " classes for " + std::to_string(d.rows) +
             " rows; give --num-classes if that is meant (inferred counts stop at " +
             std::to_string(kMaxInferredClasses) + " or the number of rows)");
  }
  return d;
}

}  // namespace dpg::data
