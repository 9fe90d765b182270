#include "runtime/core/error.h"

#include <sstream>

namespace dpg {

std::string_view code_name(Code code) {
  switch (code) {
    case Code::invalid_argument: return "invalid_argument";
    case Code::failed_precondition: return "failed_precondition";
    case Code::not_found: return "not_found";
    case Code::out_of_range: return "out_of_range";
    case Code::data_loss: return "data_loss";
    case Code::deadline_exceeded: return "deadline_exceeded";
    case Code::unavailable: return "unavailable";
    case Code::aborted: return "aborted";
    case Code::internal: return "internal";
  }
  return "unknown";
}

Error::Error(Code code, const std::string& message) : std::runtime_error(message), code_(code) {}

void fail(Code code, const std::string& message) { throw Error(code, message); }

std::string seconds_text(std::chrono::steady_clock::duration d) {
  std::ostringstream os;
  os.precision(3);
  os << std::chrono::duration<double>(d).count() << " s";
  return os.str();
}

std::string rank_prefix(int rank) {
  std::string s = "rank ";
  s += std::to_string(rank);
  s += ": ";
  return s;
}

std::string without_rank_prefix(const std::string& message, int rank) {
  const std::string own = rank_prefix(rank);
  return message.rfind(own, 0) == 0 ? message.substr(own.size()) : message;
}

}  // namespace dpg
