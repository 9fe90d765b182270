// `dpgossip launch`: starts the peers of a hosts file that live on this machine (or N peers on
// 127.0.0.1 with --peers N) as `dpgossip <command> --hosts FILE --rank R`, and supervises them.
// See docs/HOSTS.md.
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/launch.h"
#include "apps/parse.h"
#include "apps/peer_memory.h"
#include "runtime/process/find.h"
#include "runtime/core/bounds.h"
#include "runtime/core/error.h"
#include "runtime/core/json_io.h"
#include "runtime/core/log.h"
#include "runtime/net/auth.h"
#include "runtime/net/hosts.h"

namespace dpg::app {
namespace {

constexpr int kMaxLocalPeers = 1024;

struct LaunchFlags {
  std::string hosts;
  int peers = 0;
  double grace_s = 5.0;
  double peer_memory_mb = 0;    // 0: estimated from the command and its data folder
  bool no_memory_check = false;
  std::optional<int> status_port;    // given to every train command here (rank 0 serves)
  std::vector<std::string> command;  // everything after --
  CLI::Option* hosts_opt = nullptr;
  CLI::Option* peers_opt = nullptr;
};

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
  // CLI11's range check lets NaN through (every comparison with it is false).
  if (!(f.peer_memory_mb >= 0 && f.peer_memory_mb <= 1048576))
    fail(Code::invalid_argument, "launch: --peer-memory-mb must be in [0, 1048576]");
  if (f.command.empty())
    fail(Code::invalid_argument,
         "launch: no command after --; e.g. dpgossip launch --peers 4 -- train --epochs 1");
  if (by_count && has_flag(f.command, "--hosts"))
    fail(Code::invalid_argument,
         "launch: --peers writes its own hosts file; drop --hosts from the command after --, or "
         "use launch --hosts FILE");
}

void require_local_memory(const LaunchFlags& f, size_t local_peers, int world) {
  const std::uint64_t per_peer =
      f.peer_memory_mb > 0 ? static_cast<std::uint64_t>(f.peer_memory_mb * (1 << 20))
                           : estimate_peer_bytes(train_shape(f.command, world),
                                                 static_cast<int>(local_peers));
  const auto total = checked_mul(per_peer, local_peers);
  DPG_INFO("launch: " << local_peers << " local peers at about " << bytes_text(per_peer)
                      << " each" << (f.peer_memory_mb > 0 ? " (--peer-memory-mb)" : " (estimated)"));
  require_memory(total.value_or(UINT64_MAX),
                 "launch: " + std::to_string(local_peers) + " local peers at about " +
                     bytes_text(per_peer) + " each",
                 "--peer-memory-mb sets the figure per peer, --no-memory-check skips this check");
}

// launch --status-port: rank 0 serves the page (train --status-port) and every other peer feeds
// it its figures, so every command here gets the flag (on rank 0's host too: the peers agree on
// it at connection).
void add_status_port(std::vector<Child>& children, int port) {
  for (Child& c : children) {
    if (c.argv.size() < 2 || c.argv[1] != "train")
      fail(Code::invalid_argument, "launch: --status-port is for a train command (after --)");
    if (has_flag(c.argv, "--status-port"))
      fail(Code::invalid_argument,
           "launch: --status-port is given twice (to launch and to the command after --)");
    c.argv.insert(c.argv.begin() + 2, {"--status-port", std::to_string(port)});
  }
}

void run_launch(const LaunchFlags& f) {
  validate(f);
  std::optional<TempDir> tmp;  // --peers: holds the generated hosts file until the peers exit
  std::string path;
  net::HostsFile hosts;
  if (f.peers_opt->count() > 0) {
    hosts = net::local_hosts(f.peers);
    // The peers prove a fresh secret to each other, so that no other process of this machine
    // can join on their ports; the file sits in a folder only this user can read.
    hosts.secret = net::random_secret();
    tmp.emplace("dpgossip-launch", "launch");
    path = (tmp->path() / "hosts.json").string();
    net::write_hosts(hosts, path);
  } else {
    path = f.hosts;
    hosts = net::load_hosts(path);
  }
  std::vector<Child> children = local_children(hosts, path, proc::self_path().string(), f.command);
  if (f.status_port) add_status_port(children, *f.status_port);
  // The same cap as --peers, and a check that the local peers fit, before one is started.
  if (children.size() > static_cast<size_t>(kMaxLocalPeers))
    fail(Code::invalid_argument, "launch: " + path + " puts " + std::to_string(children.size()) +
                                     " peers on this machine; at most " +
                                     std::to_string(kMaxLocalPeers) + " run on one host");
  if (!f.no_memory_check) require_local_memory(f, children.size(), hosts.world());
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
  cmd->add_option("--peer-memory-mb", f->peer_memory_mb,
                  "memory each local peer needs, in MiB, for the check before starting "
                  "(default: estimated from the command: the process, the rows it keeps from its --data "
                  "folder's manifest, the model and the batch; docs/LIMITS.md)")
      ->check(CLI::Range(0.0, 1048576.0));
  cmd->add_option("--status-port", f->status_port,
                  "rank 0 serves the run's live status page on this port and every other peer "
                  "feeds it (train --status-port, given to every command; on several hosts give "
                  "it to each launch; docs/STATUS.md)")
      ->check(CLI::Range(0, 65535));
  cmd->add_flag("--no-memory-check", f->no_memory_check,
                "start the peers even when they seem not to fit in the available memory");
  cmd->add_option("command", f->command,
                  "after --: the dpgossip command each peer runs, e.g. -- train --epochs 1; "
                  "--hosts FILE --rank R are appended");
  cmd->footer("Example: dpgossip launch --peers 4 -- train --epochs 1");
  cmd->callback([f] { run_launch(*f); });
}

}  // namespace dpg::app
