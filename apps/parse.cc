#include "apps/parse.h"

#include <sstream>

#include "runtime/core/error.h"

namespace dpg::app {

bool has_flag(const std::vector<std::string>& args, const std::string& flag) {
  for (const std::string& a : args) {
    if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
  }
  return false;
}

std::string flag_value(const std::vector<std::string>& args, const std::string& flag) {
  std::string out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag && i + 1 < args.size()) out = args[i + 1];
    else if (args[i].rfind(flag + "=", 0) == 0) out = args[i].substr(flag.size() + 1);
  }
  return out;
}

CLI::Validator seed_check() {
  return CLI::Validator(
      [](std::string& text) {
        return text.find('-') == std::string::npos ? std::string()
                                                   : "a seed is an integer >= 0, got " + text;
      },
      "");
}

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

std::vector<long long> parse_size_list(const std::string& text, const std::string& flag) {
  std::vector<long long> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    long long mult = 1;
    if (!item.empty()) {
      switch (item.back()) {
        case 'K': case 'k': mult = 1LL << 10; break;
        case 'M': case 'm': mult = 1LL << 20; break;
        case 'G': case 'g': mult = 1LL << 30; break;
        default: break;
      }
      if (mult != 1) item.pop_back();
    }
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0) {
      fail(Code::invalid_argument,
           flag + ": expected comma-separated sizes such as 4K,1M,100, got \"" + text + "\"");
    }
    out.push_back(v * mult);
  }
  if (out.empty()) fail(Code::invalid_argument, flag + ": empty list");
  return out;
}

}  // namespace dpg::app
