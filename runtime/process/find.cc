#include "runtime/process/find.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "runtime/core/error.h"

namespace dpg::proc {
namespace {

namespace fs = std::filesystem;

bool fits(const fs::path& p, bool executable) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  return !executable || ::access(p.c_str(), X_OK) == 0;
}

std::vector<fs::path> path_dirs() {
  const char* env = std::getenv("PATH");
  const std::string path = env && *env ? env : "/usr/local/bin:/usr/bin:/bin";
  std::vector<fs::path> dirs;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find(':', start), path.size());
    dirs.emplace_back(end == start ? std::string(".") : path.substr(start, end - start));
    start = end + 1;
  }
  return dirs;
}

std::vector<fs::path> self_dirs(const Search& s) {
  std::vector<fs::path> dirs;
  if (s.beside_self.empty()) return dirs;
  const fs::path self = self_path().parent_path();
  for (const std::string& d : s.beside_self) {
    fs::path dir = (self / d).lexically_normal();
    if (!dir.has_filename() && dir.has_relative_path()) dir = dir.parent_path();  // "a/b/" -> "a/b"
    dirs.push_back(dir);
  }
  return dirs;
}

}  // namespace

fs::path self_path() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec)
    fail(Code::failed_precondition,
         "cannot find the running program's path (/proc/self/exe): " + ec.message());
  return p;
}

std::optional<fs::path> find_program(const std::string& name, const Search& s) {
  if (name.empty()) return std::nullopt;
  const bool bare = name.find('/') == std::string::npos;
  if (!bare && fits(name, s.executable)) return fs::path(name);
  if (!bare && fs::path(name).is_absolute()) return std::nullopt;
  for (const fs::path& d : self_dirs(s)) {
    if (fits(d / name, s.executable)) return d / name;
  }
  if (bare && s.path) {
    for (const fs::path& d : path_dirs()) {
      if (fits(d / name, s.executable)) return d / name;
    }
  }
  return std::nullopt;
}

std::optional<fs::path> find_program(const std::string& name) {
  Search s;
  s.beside_self.clear();
  return find_program(name, s);
}

fs::path require_program(const std::string& name, const std::string& what) {
  if (auto found = find_program(name)) return *found;
  fail(Code::not_found, what + ": program " + name +
                            (name.find('/') == std::string::npos ? " not found in PATH"
                                                                 : " is not an executable file"));
}

std::string where_searched(const Search& s) {
  std::vector<std::string> places;
  for (const fs::path& d : self_dirs(s)) places.push_back(d.string());
  if (s.path) places.push_back("PATH");
  std::string text;
  for (size_t i = 0; i < places.size(); ++i) {
    if (i > 0) text += i + 1 == places.size() ? " and " : ", ";
    text += places[i];
  }
  return text.empty() ? "nowhere" : text;
}

}  // namespace dpg::proc
