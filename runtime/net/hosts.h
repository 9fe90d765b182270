// The hosts file: which peers take part, where each listens, and (for later use) a shared secret
// and a topology. Also the rank of this process, from --rank or from the launcher's environment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/json_io.h"

namespace dpg::net {

struct PeerAddress {
  int rank = 0;
  std::string host;   // a name or an IPv4/IPv6 address
  uint16_t port = 0;
};

// The most peers a hosts file may list (a world of more is refused before any is parsed).
inline constexpr int kMaxWorld = 65536;

struct HostsFile {
  std::vector<PeerAddress> peers;  // peers[r].rank == r, for every rank 0..world-1
  std::string secret;              // empty when absent
  Json topology;                   // null when absent
  std::string source;              // the file it came from, for messages ("" when built in code)
  int world() const { return static_cast<int>(peers.size()); }
};

// Parses and validates a hosts document; errors (invalid_argument) name `where` and the JSON path
// at fault: "hosts.json: peers[2].port: missing", "...: duplicate rank 1 (peers[0] and peers[3])".
HostsFile parse_hosts(const Json& doc, const std::string& where);
// Reads and parses a hosts file (not_found when it is missing, invalid_argument when malformed).
HostsFile load_hosts(const std::string& path);
// `peers` peers on 127.0.0.1, each with a port that was free when asked.
HostsFile local_hosts(int peers);
// Writes a hosts file atomically (a temporary file renamed into place).
void write_hosts(const HostsFile& hosts, const std::string& path);
Json to_json(const HostsFile& hosts);

// The rank of this process: `flag` when given, else the first of OMPI_COMM_WORLD_RANK, PMI_RANK,
// SLURM_PROCID, RANK that is set. Errors name the flag or the variable and the world size.
int resolve_rank(std::optional<int> flag, int world);

// True when `host` names this machine (localhost, a loopback address, its host name or one of its
// addresses), so the launcher starts that peer here.
bool is_local_host(const std::string& host);

}  // namespace dpg::net
