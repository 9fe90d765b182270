// Reading benchmark rows (runtime/core/bench_row.h) back from the JSON lines a baseline program
// or a benchmark peer printed. Errors name the source and line (`where`) and the key at fault.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/bench_row.h"
#include "runtime/core/json_io.h"

namespace dpg::bench {

// Every key of the row is required and no other is allowed; invalid_argument otherwise. A step
// row's device is "cpu" or "cuda:N", its mode "sgd" or "dpsgd".
AllreduceRow allreduce_row_from_json(const Json& j, const std::string& where);
StepRow step_row_from_json(const Json& j, const std::string& where);

// One row per non-blank line of `text` (what `source` printed); a line that is not JSON or not a
// row fails with data_loss naming "source line N" and quoting the line.
std::vector<AllreduceRow> parse_allreduce_rows(const std::string& text, const std::string& source);
std::vector<StepRow> parse_step_rows(const std::string& text, const std::string& source);

}  // namespace dpg::bench
