// The hosts file: which peers take part, where each listens, the cluster secret that lets a peer
// join (runtime/net/auth.h), the TLS files of --tls, and a topology. Also the rank of this
// process, from --rank or from the launcher's environment. docs/HOSTS.md is the user's side.
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
  // TLS: this peer's own certificate chain and key, when they are not the file's tls defaults.
  std::string cert_file, key_file;
  int entry = -1;     // its index in the file's "peers" (for messages); -1 when built in code
};

// The file's "tls" object, paths as written (relative ones are taken from the file's folder).
struct TlsFiles {
  std::string ca_file;    // the CA every peer's certificate must be signed by
  std::string cert_file;  // every peer's certificate chain, unless its entry names its own
  std::string key_file;   // and its private key
};

// The environment variable that, when set and not empty, holds the cluster secret; it takes
// precedence over the file's secret_file and secret.
inline constexpr const char* kSecretVariable = "DPGOSSIP_SECRET";

// The most peers a hosts file may list (a world of more is refused before any is parsed).
inline constexpr int kMaxWorld = 65536;

struct HostsFile {
  std::vector<PeerAddress> peers;  // peers[r].rank == r, for every rank 0..world-1
  // The cluster secret this process uses (never printed or logged); empty when there is none.
  // parse_hosts takes it from "secret"; load_hosts then applies DPGOSSIP_SECRET or "secret_file".
  std::string secret;
  std::string secret_origin;       // where it came from, for messages: "hosts.json: secret"
  std::string secret_file;         // the file's "secret_file", as written; empty when absent
  TlsFiles tls;                    // the file's "tls"; empty fields when absent
  Json topology;                   // null when absent
  std::string source;              // the file it came from, for messages ("" when built in code)
  int world() const { return static_cast<int>(peers.size()); }
  // What messages call it: the file, or "the hosts list" when it was built in code.
  std::string name() const { return source.empty() ? std::string("the hosts list") : source; }
};

// Parses and validates a hosts document; errors (invalid_argument) name `where` and the JSON path
// at fault: "hosts.json: peers[2].port: missing", "...: duplicate rank 1 (peers[0] and peers[3])".
HostsFile parse_hosts(const Json& doc, const std::string& where);
// Reads and parses a hosts file (not_found when it is missing, invalid_argument when malformed),
// then finds the secret: DPGOSSIP_SECRET when set, else the file secret_file names (relative to
// the hosts file's folder; one line, trailing white space dropped), else the file's secret. A
// secret shorter than kMinSecretBytes is an error naming where it came from.
HostsFile load_hosts(const std::string& path);

// One peer's TLS files, resolved against the hosts file's folder, each with the JSON path it came
// from ("hosts.json: tls.ca_file", "hosts.json: peers[2].cert_file") for messages.
struct TlsPaths {
  std::string ca, cert, key;
  std::string ca_field, cert_field, key_field;
};
// invalid_argument naming the missing field when the file gives no CA, certificate or key for
// `rank`.
TlsPaths tls_paths(const HostsFile& hosts, int rank);
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
