// A command's options as a table, as the training config's fields are (runtime/core/
// train_config.h): each option is declared as a member of the command's options struct (its type
// and default) and as one row here (its flag, help and rule), from which its CLI11 flag and its
// check are generated. A check's error names the flag and the bad value, in the words of
// runtime/core/range.h: "--seconds: must be in (0, 3600], got 0". Rules between options are the
// command's own, after the table's.
#pragma once

#include <concepts>
#include <functional>
#include <optional>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/core/bounds.h"
#include "runtime/core/error.h"
#include "runtime/core/range.h"
#include "runtime/core/train_config.h"

namespace dpg::app {

// The rules a row may carry besides a Range:
struct NoRule {};
// A string among `names` ("" among them: the option may be left out; it is not listed in the
// error): "--baseline: expected torch, got "x"".
struct OneOf {
  std::vector<std::string> names;
};
// A string naming a value of enum E (EnumNames<E>): "--activation: expected relu or tanh, got "x"".
template <class E> struct EnumOf {};
// Anything else about one value: a callable given the value and the flag, which throws
// invalid_argument with a message that names the flag.

// Why a value breaks its rule: "<flag>: <rule>[ <note>][, got <got>]".
struct Refusal {
  std::string rule, got;
};

template <class O> struct OptionRow {
  std::string flag;
  std::function<void(CLI::App&, O&)> add;                 // the flag, bound to the member
  std::function<std::optional<Refusal>(const O&)> check;  // nothing: the value is fine
  std::function<bool(const O&)> applies;                  // empty: always checked
  std::string note;                                       // said after the rule

  // Checked only where `p` holds (a flag that matters only in one mode), with `note` saying which
  // after the rule: "--peers: must be in [2, 1024] (local processes), got 0".
  OptionRow when(std::function<bool(const O&)> p, std::string why) && {
    applies = std::move(p);
    note = std::move(why);
    return std::move(*this);
  }
};

// One row: `m` under `flag`; a bool member is a switch (--json), anything else takes a value and
// shows its default in --help.
template <class O, class T, class Rule = NoRule>
OptionRow<O> option(T O::*m, std::string flag, std::string help, Rule rule = {}) {
  OptionRow<O> row;
  row.flag = flag;
  row.add = [m, flag, help](CLI::App& cmd, O& o) {
    if constexpr (std::same_as<T, bool>) {
      cmd.add_flag(flag, o.*m, help);
    } else {
      CLI::Option* opt = cmd.add_option(flag, o.*m, help)->capture_default_str();
      // An unsigned member would take "-1" as its largest value: a sign is refused first.
      if constexpr (std::is_unsigned_v<T>) {
        opt->check(CLI::Validator(
            [](std::string& in) {
              const auto at = in.find_first_not_of(" \t");
              return at != std::string::npos && in[at] == '-' ? "must be >= 0, got " + in
                                                              : std::string();
            },
            "", "unsigned"));
      }
    }
  };
  row.check = [m, flag, rule](const O& o) -> std::optional<Refusal> {
    const T& v = o.*m;
    if constexpr (std::same_as<Rule, Range>) {
      static_assert(std::is_arithmetic_v<T>, "a Range checks a number");
      if (rule.contains(static_cast<double>(v))) return std::nullopt;
      return Refusal{rule.rule(std::integral<T>), number_text(static_cast<double>(v))};
    } else if constexpr (std::same_as<Rule, OneOf>) {
      std::vector<std::string> listed;  // the names, less the empty one (a flag left out)
      for (const auto& n : rule.names) {
        if (n == v) return std::nullopt;
        if (!n.empty()) listed.push_back(n);
      }
      return Refusal{"expected " + or_list(listed), "\"" + shorten(v) + "\""};
    } else if constexpr (std::invocable<const Rule&, const T&, const std::string&>) {
      rule(v, flag);
      return std::nullopt;
    } else {
      static_assert(std::same_as<Rule, NoRule>, "a rule is a Range, OneOf, EnumOf or a check");
      return std::nullopt;
    }
  };
  return row;
}

template <class O, class E>
OptionRow<O> option(std::string O::*m, std::string flag, std::string help, EnumOf<E>) {
  OptionRow<O> row = option(m, flag, std::move(help));
  row.check = [m](const O& o) -> std::optional<Refusal> {
    for (auto n : EnumNames<E>::names) {
      if (n == o.*m) return std::nullopt;
    }
    return Refusal{"expected " + enum_choices<E>(), "\"" + shorten(o.*m) + "\""};
  };
  return row;
}

// The flags of every row, on `cmd`, bound to `o`'s members.
template <class O> void add_options(CLI::App& cmd, O& o, const std::vector<OptionRow<O>>& rows) {
  for (const auto& row : rows) row.add(cmd, o);
}

// Throws invalid_argument for the first row (in table order) whose value breaks its rule.
template <class O> void check_options(const O& o, const std::vector<OptionRow<O>>& rows) {
  for (const auto& row : rows) {
    if (row.applies && !row.applies(o)) continue;
    const std::optional<Refusal> r = row.check(o);
    if (!r) continue;
    fail(Code::invalid_argument, row.flag + ": " + r->rule +
                                     (row.note.empty() ? "" : " " + row.note) +
                                     (r->got.empty() ? "" : ", got " + r->got));
  }
}

}  // namespace dpg::app
