// The training config's fields as command-line flags, shared by `train` and `audit`: one flag
// per field of the table (runtime/core/train_config.h), a bool field as a --x / --no-x pair.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/core/train_config.h"

namespace dpg::app {

// "--dp" -> "--no-dp": the switch that turns a bool field off.
std::string negated(const std::string& flag);

struct ConfigFlags {
  std::vector<const ConfigField*> fields;
  std::vector<std::string> values;  // one per field: the text its flag was given
};

// Adds a flag to `cmd` for each of `fields`; `help` gives each one's description.
void add_config_flags(CLI::App& cmd, ConfigFlags& flags,
                      const std::function<std::string(const ConfigField&)>& help);

// Applies each flag given on the command line to `c` and adds its key to `set`. Errors name the
// command and the field: "train: configuration /lr: ...".
void apply_config_flags(const CLI::App& cmd, const ConfigFlags& flags, const std::string& who,
                        TrainConfig& c, std::set<std::string>& set);

}  // namespace dpg::app
