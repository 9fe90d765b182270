#include "apps/config_flags.h"

#include "runtime/core/error.h"

namespace dpg::app {

std::string negated(const std::string& flag) { return "--no-" + flag.substr(2); }

void add_config_flags(CLI::App& cmd, ConfigFlags& flags,
                      const std::function<std::string(const ConfigField&)>& help) {
  flags.values.resize(flags.fields.size());
  for (std::size_t i = 0; i < flags.fields.size(); ++i) {
    const ConfigField& field = *flags.fields[i];
    if (field.is_bool) {
      cmd.add_flag(field.flag)->description(help(field));
      cmd.add_flag(negated(field.flag))->description("turns " + field.flag + " off");
    } else {
      cmd.add_option(field.flag, flags.values[i], help(field));
    }
  }
}

void apply_config_flags(const CLI::App& cmd, const ConfigFlags& flags, const std::string& who,
                        TrainConfig& c, std::set<std::string>& set) {
  auto given = [&](const std::string& flag) { return cmd.get_option(flag)->count() > 0; };
  for (std::size_t i = 0; i < flags.fields.size(); ++i) {
    const ConfigField& field = *flags.fields[i];
    std::string text;
    if (field.is_bool) {
      const bool on = given(field.flag), off = given(negated(field.flag));
      if (on && off) {
        fail(Code::invalid_argument,
             who + ": give " + field.flag + " or " + negated(field.flag) + ", not both");
      }
      if (!on && !off) continue;
      text = on ? "true" : "false";
    } else {
      if (!given(field.flag)) continue;
      text = flags.values[i];
    }
    try {
      field.parse(c, text);
    } catch (const Error& e) {
      fail(e.code(), who + ": configuration /" + field.key + ": " + e.what());
    }
    set.insert(field.key);
  }
}

}  // namespace dpg::app
