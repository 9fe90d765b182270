// Feature normalisation: statistics from the training split only, applied to every split.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"

namespace dpg::data {

inline constexpr double kStdFloor = 1e-6;  // a std below this is replaced by 1 (constant column)

struct NormStats {
  std::string mode = "none";  // "global", "feature" or "none"
  std::vector<double> mean;   // global: 1 value; feature: one per column; none: empty
  std::vector<double> std;    // population standard deviation, floored as above
};

// Throws invalid_argument unless mode is "global", "feature" or "none".
NormStats compute_norm_stats(const Dataset& train, const std::string& mode);

// x -> (x - mean) / std, in place.
void apply_norm(const NormStats& stats, Dataset& data);

// {"mode": ..., "mean": number or array, "std": number or array} (no mean/std for "none").
nlohmann::json norm_stats_json(const NormStats& stats);

}  // namespace dpg::data
