// Finding the programs and scripts dpgossip runs: the running binary itself (launch starts copies
// of it), the baselines installed or built beside it, and anything else on PATH.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace dpg::proc {

// The running binary (/proc/self/exe). Throws failed_precondition when Linux cannot say.
std::filesystem::path self_path();

struct Search {
  // Folders relative to the running binary's, tried in order: "." is beside it (an install),
  // "../tools/bench" the build tree's baselines seen from build/apps.
  std::vector<std::string> beside_self = {"."};
  bool path = true;         // then every folder of PATH (names without a '/' only)
  bool executable = true;   // only regular files this process may execute; else any regular file
};

// A name with a '/' is taken as it is (relative to the working folder) when it names a fitting
// file, and is otherwise looked for in `beside_self` (so "tools/x.py" is found from a build
// folder of the repository too); a bare name is looked for in `beside_self`, then PATH (an empty
// PATH element is the working folder, as for execvp). nullopt when nothing fits.
std::optional<std::filesystem::path> find_program(const std::string& name, const Search& search);

// With the default search, except `beside_self` is empty: a path as given, a bare name in PATH.
std::optional<std::filesystem::path> find_program(const std::string& name);

// find_program(name) or not_found: "<what>: program <name> not found in PATH" (or "is not an
// executable file" for a path), so a command is checked before anything starts.
std::filesystem::path require_program(const std::string& name, const std::string& what);

// "/usr/lib/dpgossip, /src/build/tools/bench and PATH": where find_program looked, for an error
// message (the folders it would try, in order).
std::string where_searched(const Search& search);

}  // namespace dpg::proc
