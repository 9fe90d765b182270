// One error type for all library code, carrying a status code in Abseil's vocabulary.
// Library code throws; only main() catches, logs and returns non-zero.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dpg {

enum class Code {
  invalid_argument,     // bad input from the user: flags, config, files
  failed_precondition,  // the system is not in a state where this can run
  not_found,            // a named file or key is missing
  out_of_range,
  data_loss,            // truncated or corrupted data
  deadline_exceeded,
  unavailable,
  aborted,
  internal,             // a broken invariant: a bug in dpgossip
};

std::string_view code_name(Code code);

class Error : public std::runtime_error {
 public:
  Error(Code code, const std::string& message);
  Code code() const { return code_; }

 private:
  Code code_;
};

[[noreturn]] void fail(Code code, const std::string& message);

// An elapsed time as error messages write it: "2.5 s" (three significant digits).
std::string seconds_text(std::chrono::steady_clock::duration d);

// "rank R: ", the start of every error a rank raises about its own part of a run (transport.h:
// its peers quote it). The one place that spells it.
std::string rank_prefix(int rank);
// `message` without a leading rank_prefix(rank), for a failure quoted inside another of the same
// rank ("rank 2: answering peer 1 failed: <its own failure>").
std::string without_rank_prefix(const std::string& message, int rank);

}  // namespace dpg
