#include "apps/parse.h"

#include <sstream>

#include "runtime/core/error.h"

namespace dpg::app {

std::vector<int> parse_int_list(const std::string& text, const std::string& flag) {
  std::vector<int> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size()) {
      fail(Code::invalid_argument, flag + ": expected comma-separated integers, got \"" + text + "\"");
    }
    out.push_back(v);
  }
  if (out.empty()) fail(Code::invalid_argument, flag + ": empty list");
  return out;
}

}  // namespace dpg::app
