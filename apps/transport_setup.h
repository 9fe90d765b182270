// The one place that picks the concrete transport of a run: shared memory with the peers the
// hosts file puts on this peer's host, TCP with the others (--transport auto), or one of them
// for every peer (tcp, shm). Used by `train` and `bench allreduce`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/core/train_config.h"
#include "runtime/net/hosts.h"
#include "runtime/net/link_options.h"
#include "runtime/net/shm/shm_transport.h"
#include "runtime/net/tcp/tcp_transport.h"
#include "runtime/net/transport.h"

namespace dpg::app {

// Which peers go over which transport: "host" is the hosts file's host string, compared as
// written (127.0.0.1 and 127.0.0.2 are two hosts, which is how tests emulate several).
struct TransportPlan {
  std::vector<int> shm_peers, tcp_peers;
};
// Throws invalid_argument naming the first peer on another host when mode is shm.
TransportPlan plan_transport(const net::HostsFile& hosts, int rank, const std::vector<int>& peers,
                             TransportMode mode);

// Builds the plan's transports: one of them alone, or both behind a RoutedTransport. With both,
// each gets its progress thread (a wait on one does not move the other's data). `link` is what
// every link shares (timeout, config hash, progress thread...), whichever transport carries it;
// `tcp` and `shm` add each transport's own settings (their LinkOptions part is replaced by
// `link`). With tcp.tls every peer goes over TCP (auto included) and shm is refused: TLS covers
// every link. `chosen`, when given, receives the plan it built (the status page shows it).
std::unique_ptr<net::Transport> make_transport(const net::HostsFile& hosts, int rank,
                                               const std::vector<int>& peers, TransportMode mode,
                                               const net::LinkOptions& link,
                                               net::TcpOptions tcp = {}, net::ShmOptions shm = {},
                                               TransportPlan* chosen = nullptr);

// host_of[r]: the index of rank r's host among the hosts file's distinct hosts (as written), for
// collective::Hierarchy.
std::vector<int> host_ids(const net::HostsFile& hosts);

// "shared memory with peers 1, 2; TCP with 4": for the start-up log.
std::string describe(const TransportPlan& plan);

}  // namespace dpg::app
