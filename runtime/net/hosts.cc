#include "runtime/net/hosts.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "runtime/core/error.h"
#include "runtime/net/auth.h"

namespace dpg::net {
namespace {

[[noreturn]] void bad(const std::string& where, const std::string& path, const std::string& what) {
  fail(Code::invalid_argument, where + ": " + path + ": " + what);
}

std::string peer_path(size_t index) { return "peers[" + std::to_string(index) + "]"; }

// The value of an integer field; rejects non-integers (1.5, "1", true) by name.
long long integer_at(const Json& entry, const std::string& key, const std::string& where,
                     const std::string& path) {
  if (!entry.contains(key)) bad(where, path + "." + key, "missing");
  const Json& v = entry.at(key);
  if (!v.is_number_integer()) bad(where, path + "." + key, "expected an integer, got " + quote(v));
  // Unsigned values beyond long long would wrap; they are out of every range checked here.
  if (v.is_number_unsigned() && v.get<unsigned long long>() > 1ULL << 62) return 1LL << 62;
  return v.get<long long>();
}

// An optional non-empty string field (a file path); "" when absent.
std::string path_at(const Json& object, const std::string& key, const std::string& where,
                    const std::string& path) {
  if (!object.contains(key)) return "";
  const Json& v = object.at(key);
  if (!v.is_string() || v.get<std::string>().empty())
    bad(where, path.empty() ? key : path + "." + key,
        "expected a non-empty string (a file path), got " + quote(v));
  if (v.get<std::string>().find('\0') != std::string::npos)
    bad(where, path.empty() ? key : path + "." + key,
        "holds a NUL character, which no file path can: " + quote(v));
  return v.get<std::string>();
}

TlsFiles parse_tls(const Json& tls, const std::string& where) {
  if (!tls.is_object())
    bad(where, "tls", "expected an object {\"ca_file\", \"cert_file\", \"key_file\"}, got " +
                          quote(tls));
  for (const auto& [key, value] : tls.items()) {
    if (key != "ca_file" && key != "cert_file" && key != "key_file")
      bad(where, "tls." + key, "unknown field (expected ca_file, cert_file, key_file)");
  }
  return {path_at(tls, "ca_file", where, "tls"), path_at(tls, "cert_file", where, "tls"),
          path_at(tls, "key_file", where, "tls")};
}

void check_secret_length(const std::string& secret, const std::string& origin) {
  if (secret.size() < kMinSecretBytes)
    fail(Code::invalid_argument,
         origin + ": the cluster secret is " + std::to_string(secret.size()) +
             " bytes; it needs at least " + std::to_string(kMinSecretBytes) +
             " (make one with `openssl rand -hex 32`)");
}

// A path from the hosts file, taken relative to the file's folder.
std::string beside(const HostsFile& h, const std::string& path) {
  const std::filesystem::path p(path);
  if (p.is_absolute() || h.source.empty()) return path;
  return (std::filesystem::path(h.source).parent_path() / p).string();
}

// The secret file's one line, trailing white space dropped; errors name the file and the field.
std::string read_secret_file(const std::string& path, const std::string& field) {
  constexpr std::size_t kMost = 4096;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(Code::not_found, field + ": " + path + ": cannot read (" + std::strerror(errno) + ")");
  std::string text(kMost + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) fail(Code::data_loss, field + ": " + path + ": read failed");
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMost)
    fail(Code::invalid_argument, field + ": " + path + ": more than " + std::to_string(kMost) +
                                     " bytes; a secret file holds one line");
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (text.find('\n') != std::string::npos)
    fail(Code::invalid_argument, field + ": " + path + ": more than one line");
  return text;
}

// Types and ranges of one entry; `rank` gets the rank as written, checked by the caller against
// the world size.
PeerAddress parse_peer(const Json& entry, size_t index, const std::string& where, long long& rank) {
  const std::string path = peer_path(index);
  if (!entry.is_object()) bad(where, path, "expected an object {\"rank\", \"host\", \"port\"}, got " +
                                               quote(entry));
  for (const auto& [key, value] : entry.items()) {
    if (key != "rank" && key != "host" && key != "port" && key != "cert_file" && key != "key_file")
      bad(where, path + "." + key,
          "unknown field (a peer has rank, host, port, and optionally cert_file and key_file)");
  }
  PeerAddress p;
  rank = integer_at(entry, "rank", where, path);
  if (!entry.contains("host")) bad(where, path + ".host", "missing");
  const Json& host = entry.at("host");
  if (!host.is_string() || host.get<std::string>().empty())
    bad(where, path + ".host", "expected a non-empty string, got " + quote(host));
  // The resolver and the logs would read the name only up to a NUL: another peer's address.
  if (host.get<std::string>().find('\0') != std::string::npos)
    bad(where, path + ".host", "holds a NUL character, which no host name can: " + quote(host));
  const long long port = integer_at(entry, "port", where, path);
  if (port < 1 || port > 65535)
    bad(where, path + ".port", "expected a port in 1..65535, got " + std::to_string(port));
  p.rank = static_cast<int>(std::clamp<long long>(rank, -1, 1LL << 30));
  p.host = host.get<std::string>();
  p.port = static_cast<uint16_t>(port);
  p.cert_file = path_at(entry, "cert_file", where, path);
  p.key_file = path_at(entry, "key_file", where, path);
  p.entry = static_cast<int>(index);
  return p;
}

// "; no peer has rank 2, 5" when some of 0..world-1 are absent, else "".
std::string missing_ranks(const std::vector<long long>& ranks) {
  const int world = static_cast<int>(ranks.size());
  std::vector<bool> seen(ranks.size(), false);
  for (const long long r : ranks) {
    if (r >= 0 && r < world) seen[r] = true;
  }
  std::string out;
  for (int r = 0; r < world; ++r) {
    if (!seen[r]) out += (out.empty() ? "" : ", ") + std::to_string(r);
  }
  return out.empty() ? "" : "; no peer has rank " + out;
}

// Holds an open socket until destroyed, so every port chosen stays taken until all are chosen.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  Socket& operator=(Socket&&) = delete;
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

uint16_t bind_free_port(std::vector<Socket>& keep) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail(Code::unavailable, std::string("local_hosts: socket: ") + std::strerror(errno));
  keep.emplace_back(fd);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    fail(Code::unavailable,
         std::string("local_hosts: bind to 127.0.0.1 port 0: ") + std::strerror(errno));
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    fail(Code::unavailable, std::string("local_hosts: getsockname: ") + std::strerror(errno));
  return ntohs(addr.sin_port);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// An address in binary form, IPv4-mapped IPv6 addresses folded to IPv4, for comparisons.
struct Address {
  int family = 0;  // AF_INET or AF_INET6; 0 when the text is not an address
  unsigned char bytes[16] = {};
  bool operator==(const Address& o) const {
    return family == o.family && std::memcmp(bytes, o.bytes, sizeof bytes) == 0;
  }
};

Address parse_address(const std::string& text) {
  Address a;
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    a.family = AF_INET;
    std::memcpy(a.bytes, &v4, sizeof v4);
  } else if (::inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_V4MAPPED(&v6)) {
      a.family = AF_INET;
      std::memcpy(a.bytes, v6.s6_addr + 12, 4);
    } else {
      a.family = AF_INET6;
      std::memcpy(a.bytes, &v6, sizeof v6);
    }
  }
  return a;
}

bool is_loopback(const Address& a) {
  if (a.family == AF_INET) return a.bytes[0] == 127;
  if (a.family == AF_INET6) {
    static const unsigned char one[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return std::memcmp(a.bytes, one, 16) == 0;
  }
  return false;
}

bool is_interface_address(const Address& want) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return false;  // no list: only the other tests apply
  bool found = false;
  for (const ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    Address a;
    if (i->ifa_addr->sa_family == AF_INET) {
      a.family = AF_INET;
      const auto* sin = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      std::memcpy(a.bytes, &sin->sin_addr, sizeof sin->sin_addr);
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      a.family = AF_INET6;
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      std::memcpy(a.bytes, &sin6->sin6_addr, sizeof sin6->sin6_addr);
    } else {
      continue;
    }
    found = (a == want);
  }
  ::freeifaddrs(list);
  return found;
}

}  // namespace

HostsFile parse_hosts(const Json& doc, const std::string& where) {
  if (!doc.is_object()) fail(Code::invalid_argument, where + ": expected a JSON object with \"peers\"");
  for (const auto& [key, value] : doc.items()) {
    if (key != "peers" && key != "secret" && key != "secret_file" && key != "tls" &&
        key != "topology")
      bad(where, key, "unknown field (expected peers, secret, secret_file, tls, topology)");
  }
  if (!doc.contains("peers")) bad(where, "peers", "missing");
  const Json& list = doc.at("peers");
  if (!list.is_array() || list.empty())
    bad(where, "peers", "expected a non-empty array of {\"rank\", \"host\", \"port\"}, got " +
                            quote(list));
  if (list.size() > static_cast<size_t>(kMaxWorld))
    bad(where, "peers", std::to_string(list.size()) + " peers; a run has at most " +
                            std::to_string(kMaxWorld));
  HostsFile h;
  h.source = where;
  std::vector<PeerAddress> in_order;
  std::vector<long long> ranks(list.size());
  for (size_t i = 0; i < list.size(); ++i) in_order.push_back(parse_peer(list[i], i, where, ranks[i]));

  const int world = static_cast<int>(in_order.size());
  const std::string missing = missing_ranks(ranks);
  std::vector<int> index_of_rank(in_order.size(), -1);
  for (size_t i = 0; i < in_order.size(); ++i) {
    const long long r = ranks[i];
    if (r < 0 || r >= world)
      bad(where, peer_path(i) + ".rank",
          "rank " + std::to_string(r) + " is out of range: " + std::to_string(world) +
              " peers take ranks 0.." + std::to_string(world - 1) + missing);
    if (index_of_rank[r] >= 0)
      bad(where, peer_path(i) + ".rank",
          "duplicate rank " + std::to_string(r) + " (" + peer_path(index_of_rank[r]) + " and " +
              peer_path(i) + ")" + missing);
    index_of_rank[r] = static_cast<int>(i);
  }
  std::map<std::pair<std::string, uint16_t>, size_t> index_of_address;
  for (size_t i = 0; i < in_order.size(); ++i) {
    const auto key = std::make_pair(in_order[i].host, in_order[i].port);
    const auto [it, inserted] = index_of_address.emplace(key, i);
    if (!inserted)
      bad(where, peer_path(i),
          "address " + key.first + ":" + std::to_string(key.second) + " is also " +
              peer_path(it->second) + "'s; two peers cannot listen on one port");
  }
  h.peers.resize(in_order.size());
  for (auto& p : in_order) h.peers[p.rank] = std::move(p);

  if (doc.contains("secret") && doc.contains("secret_file"))
    bad(where, "secret_file", "give secret or secret_file, not both");
  if (doc.contains("secret")) {
    const Json& s = doc.at("secret");
    // Its type only: even a malformed secret is not echoed.
    if (!s.is_string()) bad(where, "secret", std::string("expected a string, got ") + s.type_name());
    h.secret = s.get<std::string>();
    h.secret_origin = where + ": secret";
    check_secret_length(h.secret, h.secret_origin);
  }
  h.secret_file = path_at(doc, "secret_file", where, "");
  if (doc.contains("tls")) h.tls = parse_tls(doc.at("tls"), where);
  if (doc.contains("topology")) h.topology = doc.at("topology");
  return h;
}

HostsFile load_hosts(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    fail(Code::not_found, path + ": hosts file not found");
  HostsFile h = parse_hosts(read_json_file(path), path);
  const char* env = std::getenv(kSecretVariable);
  if (env != nullptr && *env != '\0') {
    h.secret = env;
    h.secret_origin = kSecretVariable;
  } else if (!h.secret_file.empty()) {
    const std::string field = path + ": secret_file";
    h.secret = read_secret_file(beside(h, h.secret_file), field);
    h.secret_origin = beside(h, h.secret_file) + " (" + field + ")";
  }
  if (!h.secret.empty()) check_secret_length(h.secret, h.secret_origin);
  return h;
}

TlsPaths tls_paths(const HostsFile& hosts, int rank) {
  const std::string where = hosts.name();
  const PeerAddress& p = hosts.peers.at(static_cast<std::size_t>(rank));
  const std::string own = peer_path(p.entry < 0 ? static_cast<size_t>(rank)
                                                : static_cast<size_t>(p.entry));
  auto pick = [&](const std::string& mine, const std::string& shared, const char* key,
                  std::string& field) {
    field = where + ": " + (mine.empty() ? std::string("tls.") + key : own + "." + key);
    if (mine.empty() && shared.empty())
      fail(Code::invalid_argument,
           where + ": tls." + key + ": missing; --tls needs tls.ca_file, and a certificate and "
           "key for rank " + std::to_string(rank) + " (tls.cert_file and tls.key_file, or " +
           own + ".cert_file and " + own + ".key_file)");
    return beside(hosts, mine.empty() ? shared : mine);
  };
  TlsPaths t;
  t.ca = pick("", hosts.tls.ca_file, "ca_file", t.ca_field);
  t.cert = pick(p.cert_file, hosts.tls.cert_file, "cert_file", t.cert_field);
  t.key = pick(p.key_file, hosts.tls.key_file, "key_file", t.key_field);
  return t;
}

HostsFile local_hosts(int peers) {
  if (peers < 1) fail(Code::invalid_argument, "local_hosts: need at least 1 peer, got " +
                                                  std::to_string(peers));
  std::vector<Socket> keep;  // closed together on return, after every port is chosen
  keep.reserve(static_cast<size_t>(peers));
  HostsFile h;
  for (int r = 0; r < peers; ++r) {
    PeerAddress p;
    p.rank = r;
    p.host = "127.0.0.1";
    p.port = bind_free_port(keep);
    h.peers.push_back(std::move(p));
  }
  return h;
}

Json to_json(const HostsFile& hosts) {
  Json peers = Json::array();
  for (const auto& p : hosts.peers) {
    Json entry = {{"rank", p.rank}, {"host", p.host}, {"port", p.port}};
    if (!p.cert_file.empty()) entry["cert_file"] = p.cert_file;
    if (!p.key_file.empty()) entry["key_file"] = p.key_file;
    peers.push_back(std::move(entry));
  }
  Json doc = {{"peers", std::move(peers)}};
  // The secret as the file had it: its secret_file, else its secret, never one from the
  // environment.
  if (!hosts.secret_file.empty()) {
    doc["secret_file"] = hosts.secret_file;
  } else if (!hosts.secret.empty() && hosts.secret_origin != kSecretVariable) {
    doc["secret"] = hosts.secret;
  }
  Json tls = Json::object();
  if (!hosts.tls.ca_file.empty()) tls["ca_file"] = hosts.tls.ca_file;
  if (!hosts.tls.cert_file.empty()) tls["cert_file"] = hosts.tls.cert_file;
  if (!hosts.tls.key_file.empty()) tls["key_file"] = hosts.tls.key_file;
  if (!tls.empty()) doc["tls"] = std::move(tls);
  if (!hosts.topology.is_null()) doc["topology"] = hosts.topology;
  return doc;
}

void write_hosts(const HostsFile& hosts, const std::string& path) {
  write_file_atomic(path, to_json(hosts).dump(2) + "\n");
}

int resolve_rank(std::optional<int> flag, int world) {
  if (world < 1) fail(Code::invalid_argument, "rank: world size must be >= 1, got " +
                                                  std::to_string(world));
  const std::string range = " (" + std::to_string(world) + " peers take ranks 0.." +
                            std::to_string(world - 1) + ")";
  if (flag) {
    if (*flag < 0 || *flag >= world)
      fail(Code::invalid_argument, "--rank " + std::to_string(*flag) + " is out of range" + range);
    return *flag;
  }
  static constexpr const char* kVariables[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID",
                                               "RANK"};
  for (const char* name : kVariables) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    const std::string text(value);
    int rank = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), rank);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size())
      fail(Code::invalid_argument,
           std::string(name) + "=\"" + text + "\" is not an integer rank" + range);
    if (rank < 0 || rank >= world)
      fail(Code::invalid_argument,
           std::string(name) + "=" + text + " is out of range" + range);
    return rank;
  }
  fail(Code::invalid_argument,
       "no rank: pass --rank, or run under a launcher that sets one of OMPI_COMM_WORLD_RANK, "
       "PMI_RANK, SLURM_PROCID, RANK (dpgossip launch, mpirun, srun)");
}

bool is_local_host(const std::string& host) {
  if (host.empty()) return false;
  const std::string name = lower(host);
  if (name == "localhost") return true;
  const Address a = parse_address(host);
  if (is_loopback(a)) return true;
  if (a.family != 0) return is_interface_address(a);
  char self[256] = {};
  if (::gethostname(self, sizeof self - 1) == 0 && name == lower(self)) return true;
  return false;
}

}  // namespace dpg::net
