#include "runtime/data/normalize.h"

#include <cmath>

#include "runtime/core/check.h"
#include "runtime/core/error.h"

namespace dpg::data {
namespace {

double floored(double variance) {
  const double s = std::sqrt(variance);
  return s < kStdFloor ? 1.0 : s;
}

// Two passes in double: the mean first, then the squared deviations (no cancellation).
void global_stats(const Dataset& train, NormStats& stats) {
  double sum = 0.0;
  for (float x : train.features) sum += x;
  const double n = static_cast<double>(train.features.size());
  const double mean = sum / n;
  double sq = 0.0;
  for (float x : train.features) sq += (x - mean) * (x - mean);
  stats.mean = {mean};
  stats.std = {floored(sq / n)};
}

void feature_stats(const Dataset& train, NormStats& stats) {
  const std::size_t cols = train.cols;
  std::vector<double> sum(cols, 0.0), sq(cols, 0.0);
  for (std::size_t r = 0; r < train.rows; ++r) {
    const float* row = train.features.data() + r * cols;
    for (std::size_t c = 0; c < cols; ++c) sum[c] += row[c];
  }
  const double n = static_cast<double>(train.rows);
  for (std::size_t c = 0; c < cols; ++c) sum[c] /= n;
  for (std::size_t r = 0; r < train.rows; ++r) {
    const float* row = train.features.data() + r * cols;
    for (std::size_t c = 0; c < cols; ++c) sq[c] += (row[c] - sum[c]) * (row[c] - sum[c]);
  }
  stats.mean = std::move(sum);
  stats.std.resize(cols);
  for (std::size_t c = 0; c < cols; ++c) stats.std[c] = floored(sq[c] / n);
}

}  // namespace

NormStats compute_norm_stats(const Dataset& train, const std::string& mode) {
  NormStats stats;
  stats.mode = mode;
  if (mode == "none") return stats;
  DPG_CHECK(train.rows > 0 && train.cols > 0);
  DPG_CHECK_EQ(train.features.size(), train.rows * train.cols);
  if (mode == "global") {
    global_stats(train, stats);
  } else if (mode == "feature") {
    feature_stats(train, stats);
  } else {
    fail(Code::invalid_argument,
         "normalize: expected \"global\", \"feature\" or \"none\", got \"" + mode + "\"");
  }
  return stats;
}

void apply_norm(const NormStats& stats, Dataset& data) {
  if (stats.mode == "none") return;
  if (stats.mode == "global") {
    const float mean = static_cast<float>(stats.mean[0]);
    const float inv = static_cast<float>(1.0 / stats.std[0]);
    for (float& x : data.features) x = (x - mean) * inv;
    return;
  }
  DPG_CHECK_EQ(stats.mean.size(), data.cols);
  std::vector<float> mean(data.cols), inv(data.cols);
  for (std::size_t c = 0; c < data.cols; ++c) {
    mean[c] = static_cast<float>(stats.mean[c]);
    inv[c] = static_cast<float>(1.0 / stats.std[c]);
  }
  for (std::size_t r = 0; r < data.rows; ++r) {
    float* row = data.features.data() + r * data.cols;
    for (std::size_t c = 0; c < data.cols; ++c) row[c] = (row[c] - mean[c]) * inv[c];
  }
}

nlohmann::json norm_stats_json(const NormStats& stats) {
  nlohmann::json j = {{"mode", stats.mode}};
  if (stats.mode == "global") {
    j["mean"] = stats.mean[0];
    j["std"] = stats.std[0];
  } else if (stats.mode == "feature") {
    j["mean"] = stats.mean;
    j["std"] = stats.std;
  }
  return j;
}

}  // namespace dpg::data
