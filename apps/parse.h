// Small parsing helpers shared by the subcommands.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace dpg::app {

// For an unsigned seed option: CLI11 would wrap "-1" to 2^64 - 1 without a word, so any minus
// sign is refused ("a seed is an integer >= 0, got -1").
CLI::Validator seed_check();

// "784,256,10" -> {784, 256, 10}; errors name the flag.
std::vector<int> parse_int_list(const std::string& text, const std::string& flag);

// "4K,64K,1M,100" -> {4096, 65536, 1048576, 100} (K = KiB, M = MiB, G = GiB); errors name the flag.
std::vector<long long> parse_size_list(const std::string& text, const std::string& flag);

// In a command line `args` (another command's, as `launch` hands it on): whether `flag` is given,
// alone or as `flag=V`; and the value of its last `flag V` or `flag=V`, empty when absent.
bool has_flag(const std::vector<std::string>& args, const std::string& flag);
std::string flag_value(const std::vector<std::string>& args, const std::string& flag);

}  // namespace dpg::app
