// Small parsing helpers shared by the subcommands.
#pragma once

#include <string>
#include <vector>

namespace dpg::app {

// "784,256,10" -> {784, 256, 10}; errors name the flag.
std::vector<int> parse_int_list(const std::string& text, const std::string& flag);

}  // namespace dpg::app
