#include "apps/transport_setup.h"

#include <algorithm>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/net/routed_transport.h"

namespace dpg::app {
namespace {

std::string list(const std::vector<int>& v) {
  std::string s;
  for (int p : v) s += (s.empty() ? "" : ", ") + std::to_string(p);
  return s;
}

}  // namespace

TransportPlan plan_transport(const net::HostsFile& hosts, int rank, const std::vector<int>& peers,
                             TransportMode mode) {
  TransportPlan plan;
  const std::string& here = hosts.peers.at(rank).host;
  for (int p : peers) {
    const std::string& there = hosts.peers.at(p).host;
    if (mode == TransportMode::shm && there != here) {
      fail(Code::invalid_argument,
           "--transport shm: peer " + std::to_string(p) + " is on host " + there + " and this " +
               "peer (rank " + std::to_string(rank) + ") on " + here + " in " + hosts.name() +
               "; shared memory needs both on one host (use --transport auto or tcp)");
    }
    // nccl: the algorithm's messages and the float all-reduces go through NCCL (the trainer
    // sets that up over this transport); everything else, its bootstrap included, travels as
    // under auto.
    const bool shm = mode == TransportMode::shm ||
                     ((mode == TransportMode::automatic || mode == TransportMode::nccl) &&
                      there == here);
    (shm ? plan.shm_peers : plan.tcp_peers).push_back(p);
  }
  return plan;
}

std::vector<int> host_ids(const net::HostsFile& hosts) {
  std::vector<std::string> seen;
  std::vector<int> out;
  for (const auto& p : hosts.peers) {
    auto it = std::find(seen.begin(), seen.end(), p.host);
    if (it == seen.end()) it = seen.insert(seen.end(), p.host);
    out.push_back(static_cast<int>(it - seen.begin()));
  }
  return out;
}

std::string describe(const TransportPlan& plan) {
  std::string s;
  if (!plan.shm_peers.empty()) s = "shared memory with peer" + std::string(plan.shm_peers.size() > 1 ? "s " : " ") + list(plan.shm_peers);
  if (!plan.tcp_peers.empty()) {
    s += (s.empty() ? "" : "; ") + std::string("TCP with peer") +
         (plan.tcp_peers.size() > 1 ? "s " : " ") + list(plan.tcp_peers);
  }
  return s.empty() ? "no peers" : s;
}

std::unique_ptr<net::Transport> make_transport(const net::HostsFile& hosts, int rank,
                                               const std::vector<int>& peers, TransportMode mode,
                                               const net::LinkOptions& link,
                                               net::TcpOptions tcp, net::ShmOptions shm,
                                               TransportPlan* chosen) {
  static_cast<net::LinkOptions&>(tcp) = link;
  static_cast<net::LinkOptions&>(shm) = link;
  // TLS's certificates name who a peer is; shared memory checks only the user id, so a run that
  // asks for TLS keeps every link on it (docs/SECURITY.md).
  if (tcp.tls && mode == TransportMode::shm) {
    fail(Code::invalid_argument, "--tls: TLS runs over TCP; --transport shm has none (use auto or tcp)");
  }
  if (tcp.tls) mode = TransportMode::tcp;
  const TransportPlan plan = plan_transport(hosts, rank, peers, mode);
  if (rank == 0) DPG_INFO("transport: " << describe(plan));  // one voice per run
  if (chosen != nullptr) *chosen = plan;
  if (plan.shm_peers.empty() || mode == TransportMode::tcp) {
    return std::make_unique<net::TcpTransport>(hosts, rank, plan.tcp_peers, tcp);
  }
  if (plan.tcp_peers.empty()) {
    return std::make_unique<net::ShmTransport>(hosts, rank, plan.shm_peers, shm);
  }
  tcp.progress_thread = shm.progress_thread = true;
  // TCP first on every peer, then shared memory: each set-up waits only on peers in the same one.
  auto over_tcp = std::make_unique<net::TcpTransport>(hosts, rank, plan.tcp_peers, tcp);
  auto over_shm = std::make_unique<net::ShmTransport>(hosts, rank, plan.shm_peers, shm);
  std::vector<int> route(hosts.world(), 0);
  for (int p : plan.shm_peers) route[p] = 1;
  return std::make_unique<net::RoutedTransport>(std::move(over_tcp), std::move(over_shm),
                                                std::move(route));
}

}  // namespace dpg::app
