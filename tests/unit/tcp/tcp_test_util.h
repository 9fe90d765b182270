// Shared by the TCP tests: peers as threads of this process over loopback.
#pragma once

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/collective/communicator.h"
#include "runtime/core/error.h"
#include "runtime/net/hosts.h"
#include "runtime/net/tcp/tcp_transport.h"

namespace dpg::test {

// Changes one rank's options or its copy of the hosts file (its secret, its TLS files).
using PerRank = std::function<void(int rank, net::TcpOptions&, net::HostsFile&)>;

// Runs body on one thread per peer of `hosts` over TCP; returns each rank's error message (""
// when it passed). Each rank connects to `peers[rank]`, or by default to what a communicator
// needs.
inline std::vector<std::string> run_tcp_on(const net::HostsFile& hosts, net::TcpOptions o,
                                           const std::function<void(net::TcpTransport&)>& body,
                                           const PerRank& per_rank = {},
                                           const std::vector<std::vector<int>>& peers = {}) {
  const int n = hosts.world();
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        net::TcpOptions mine = o;
        net::HostsFile h = hosts;
        if (per_rank) per_rank(r, mine, h);
        net::TcpTransport t(h, r,
                            peers.empty() ? collective::peers_needed(r, n, {}) : peers[r], mine);
        body(t);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

inline std::vector<std::string> run_tcp(int n, net::TcpOptions o,
                                        const std::function<void(net::TcpTransport&)>& body,
                                        const PerRank& per_rank = {},
                                        const std::vector<std::vector<int>>& peers = {}) {
  return run_tcp_on(net::local_hosts(n), o, body, per_rank, peers);
}

}  // namespace dpg::test
