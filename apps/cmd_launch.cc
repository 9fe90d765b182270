// `dpgossip launch`: starts the peers of a hosts file that live on this machine (or N peers on
// 127.0.0.1 with --peers N) as `dpgossip <command> --hosts FILE --rank R`, and supervises them.
// See docs/HOSTS.md.
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/launch.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/net/hosts.h"

namespace dpg::app {
namespace {

constexpr int kMaxLocalPeers = 1024;

struct LaunchFlags {
  std::string hosts;
  int peers = 0;
  double grace_s = 5.0;
  std::vector<std::string> command;  // everything after --
  CLI::Option* hosts_opt = nullptr;
  CLI::Option* peers_opt = nullptr;
};

// A folder made with mkdtemp, removed with its contents when this goes out of scope.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/dpgossip-launch-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr)
      fail(Code::failed_precondition, "launch: cannot create a temporary folder " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

bool has_flag(const std::vector<std::string>& args, const std::string& flag) {
  for (const std::string& a : args) {
    if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
  }
  return false;
}

std::string self_exe() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("/proc/self/exe") : p.string();
}

void validate(const LaunchFlags& f) {
  const bool by_file = f.hosts_opt->count() > 0, by_count = f.peers_opt->count() > 0;
  if (by_file == by_count)
    fail(Code::invalid_argument, "launch: give exactly one of --hosts FILE and --peers N");
  if (by_count && (f.peers < 1 || f.peers > kMaxLocalPeers))
    fail(Code::invalid_argument, "launch: --peers must be in 1.." +
                                     std::to_string(kMaxLocalPeers) + ", got " +
                                     std::to_string(f.peers));
  if (!(std::isfinite(f.grace_s) && f.grace_s >= 0 && f.grace_s <= 3600))
    fail(Code::invalid_argument, "launch: --grace-s must be in [0, 3600]");
  if (f.command.empty())
    fail(Code::invalid_argument,
         "launch: no command after --; e.g. dpgossip launch --peers 4 -- train --epochs 1");
  if (by_count && has_flag(f.command, "--hosts"))
    fail(Code::invalid_argument,
         "launch: --peers writes its own hosts file; drop --hosts from the command after --, or "
         "use launch --hosts FILE");
}

void run_launch(const LaunchFlags& f) {
  validate(f);
  std::optional<TempDir> tmp;  // --peers: holds the generated hosts file until the peers exit
  std::string path;
  net::HostsFile hosts;
  if (f.peers_opt->count() > 0) {
    hosts = net::local_hosts(f.peers);
    tmp.emplace();
    path = (tmp->path() / "hosts.json").string();
    net::write_hosts(hosts, path);
  } else {
    path = f.hosts;
    hosts = net::load_hosts(path);
  }
  const std::vector<Child> children = local_children(hosts, path, self_exe(), f.command);
  if (static_cast<int>(children.size()) < hosts.world()) {
    DPG_WARN("launch: " << path << ": starting " << children.size() << " of " << hosts.world()
                        << " peers here; start the others on their own hosts");
  }
  std::string ranks;
  for (const Child& c : children) ranks += (ranks.empty() ? "" : ",") + c.label;
  DPG_INFO("launch: starting rank" << (children.size() == 1 ? " " : "s ") << ranks << " of "
                                   << hosts.world() << " (hosts file " << path << ")");
  SuperviseOptions o;
  o.grace = std::chrono::milliseconds(std::llround(f.grace_s * 1000.0));
  const int rc = supervise(children, o);
  // The code of the failing peer (or 128 + signal) becomes dpgossip's own, without a message.
  if (rc != 0) throw CLI::RuntimeError(rc);
}

}  // namespace

void add_launch(CLI::App& app) {
  auto f = std::make_shared<LaunchFlags>();
  auto* cmd = app.add_subcommand(
      "launch", "Start this machine's peers and supervise them: launch --peers 4 -- train ...");
  f->hosts_opt = cmd->add_option("--hosts", f->hosts, "hosts file (see docs/HOSTS.md)");
  f->peers_opt = cmd->add_option("--peers", f->peers, "N peers on 127.0.0.1 on free ports");
  cmd->add_option("--grace-s", f->grace_s,
                  "seconds between SIGTERM and SIGKILL when stopping the peers (default 5)");
  cmd->add_option("command", f->command,
                  "after --: the dpgossip command each peer runs, e.g. -- train --epochs 1; "
                  "--hosts FILE --rank R are appended");
  cmd->footer("Example: dpgossip launch --peers 4 -- train --epochs 1");
  cmd->callback([f] { run_launch(*f); });
}

}  // namespace dpg::app
