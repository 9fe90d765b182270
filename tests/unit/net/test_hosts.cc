#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "runtime/core/error.h"
#include "runtime/net/hosts.h"

namespace fs = std::filesystem;
using dpg::Json;
using dpg::net::HostsFile;

namespace {

// The error parse_hosts throws for `doc`, checked to be invalid_argument; "" if none.
std::string parse_error(const Json& doc) {
  try {
    dpg::net::parse_hosts(doc, "hosts.json");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::invalid_argument);
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

Json peer(int rank, const std::string& host, int port) {
  return {{"rank", rank}, {"host", host}, {"port", port}};
}

Json three_peers() {
  return {{"peers", {peer(0, "127.0.0.1", 29500), peer(1, "127.0.0.1", 29501),
                     peer(2, "10.0.0.2", 29500)}}};
}

// A scratch folder removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "dpg_test_hosts_XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() { fs::remove_all(path); }
};

// Sets the launcher variables for one test and clears them all afterwards.
struct CleanRankEnv {
  static constexpr const char* kNames[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID",
                                           "RANK"};
  CleanRankEnv() { clear(); }
  ~CleanRankEnv() { clear(); }
  static void clear() {
    for (const char* n : kNames) ::unsetenv(n);
  }
};

std::string rank_error(std::optional<int> flag, int world) {
  try {
    dpg::net::resolve_rank(flag, world);
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::invalid_argument);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("hosts: a good document parses, ordered by rank, with secret and topology") {
  Json doc = {{"peers", {peer(2, "10.0.0.2", 29500), peer(0, "127.0.0.1", 29500),
                         peer(1, "127.0.0.1", 29501)}},
              {"secret", "s3cret-s3cret-s3cret"},
              {"topology", {{"kind", "ring"}}}};
  const HostsFile h = dpg::net::parse_hosts(doc, "hosts.json");
  REQUIRE(h.world() == 3);
  for (int r = 0; r < 3; ++r) CHECK(h.peers[r].rank == r);
  CHECK(h.peers[0].port == 29500);
  CHECK(h.peers[1].port == 29501);
  CHECK(h.peers[2].host == "10.0.0.2");
  CHECK(h.secret == "s3cret-s3cret-s3cret");
  CHECK(h.secret_origin == "hosts.json: secret");
  CHECK(h.topology == Json{{"kind", "ring"}});
  CHECK(h.source == "hosts.json");

  const HostsFile plain = dpg::net::parse_hosts(three_peers(), "hosts.json");
  CHECK(plain.secret.empty());
  CHECK(plain.topology.is_null());
  CHECK(dpg::net::to_json(plain) == three_peers());
}

TEST_CASE("hosts: document and peer structure errors name the file and the path") {
  CHECK(contains(parse_error(Json::array()), "hosts.json: expected a JSON object"));
  CHECK(contains(parse_error(Json::object()), "hosts.json: peers: missing"));
  CHECK(contains(parse_error({{"peers", Json::array()}}), "hosts.json: peers: expected a non-empty array"));
  CHECK(contains(parse_error({{"peers", 3}}), "hosts.json: peers: expected a non-empty array"));

  Json doc = three_peers();
  doc["secrets"] = "x";
  CHECK(contains(parse_error(doc), "hosts.json: secrets: unknown field"));

  doc = three_peers();
  doc["secret"] = 42;
  CHECK(contains(parse_error(doc), "hosts.json: secret: expected a string, got number"));
  CHECK_FALSE(contains(parse_error(doc), "42"));

  doc = three_peers();
  doc["peers"][1] = "127.0.0.1:29501";
  CHECK(contains(parse_error(doc), "hosts.json: peers[1]: expected an object"));

  doc = three_peers();
  doc["peers"][2]["weight"] = 1;
  CHECK(contains(parse_error(doc), "hosts.json: peers[2].weight: unknown field"));
}

TEST_CASE("hosts: field errors name the path") {
  Json doc = three_peers();
  doc["peers"][2].erase("port");
  CHECK(contains(parse_error(doc), "hosts.json: peers[2].port: missing"));

  doc = three_peers();
  doc["peers"][1].erase("rank");
  CHECK(contains(parse_error(doc), "hosts.json: peers[1].rank: missing"));

  doc = three_peers();
  doc["peers"][1]["rank"] = "1";
  CHECK(contains(parse_error(doc), "hosts.json: peers[1].rank: expected an integer"));

  doc = three_peers();
  doc["peers"][1]["rank"] = 1.5;
  CHECK(contains(parse_error(doc), "hosts.json: peers[1].rank: expected an integer"));

  doc = three_peers();
  doc["peers"][0].erase("host");
  CHECK(contains(parse_error(doc), "hosts.json: peers[0].host: missing"));

  doc = three_peers();
  doc["peers"][0]["host"] = "";
  CHECK(contains(parse_error(doc), "hosts.json: peers[0].host: expected a non-empty string"));

  doc = three_peers();
  doc["peers"][0]["host"] = 127;
  CHECK(contains(parse_error(doc), "hosts.json: peers[0].host: expected a non-empty string"));

  // A NUL would cut the name (and a path) short where the resolver or open() reads it.
  doc = three_peers();
  doc["peers"][0]["host"] = std::string("127.0.0.1\0evil", 14);
  CHECK(contains(parse_error(doc), "hosts.json: peers[0].host: holds a NUL character"));
  doc = three_peers();
  doc["peers"][1]["cert_file"] = std::string("a.pem\0b", 7);
  CHECK(contains(parse_error(doc), "hosts.json: peers[1].cert_file: holds a NUL character"));

  for (const Json& port : {Json(0), Json(65536), Json(-1), Json(1ULL << 63)}) {
    doc = three_peers();
    doc["peers"][2]["port"] = port;
    CHECK(contains(parse_error(doc), "hosts.json: peers[2].port: expected a port in 1..65535"));
  }
  doc = three_peers();
  doc["peers"][2]["port"] = "29500";
  CHECK(contains(parse_error(doc), "hosts.json: peers[2].port: expected an integer"));

  doc = three_peers();
  doc["peers"][2]["port"] = 65535;
  CHECK(parse_error(doc).empty());
}

TEST_CASE("hosts: ranks must be exactly 0..n-1") {
  Json doc = three_peers();
  doc["peers"][2]["rank"] = 3;
  const std::string out_of_range = parse_error(doc);
  CHECK(contains(out_of_range, "hosts.json: peers[2].rank: rank 3 is out of range"));
  CHECK(contains(out_of_range, "3 peers take ranks 0..2"));
  CHECK(contains(out_of_range, "no peer has rank 2"));

  doc = three_peers();
  doc["peers"][0]["rank"] = -1;
  CHECK(contains(parse_error(doc), "hosts.json: peers[0].rank: rank -1 is out of range"));

  doc = three_peers();
  doc["peers"][2]["rank"] = 0;
  const std::string duplicate = parse_error(doc);
  CHECK(contains(duplicate, "hosts.json: peers[2].rank: duplicate rank 0 (peers[0] and peers[2])"));
  CHECK(contains(duplicate, "no peer has rank 2"));
}

TEST_CASE("hosts: two peers on one host:port is an error naming both") {
  Json doc = three_peers();
  doc["peers"][2]["host"] = "127.0.0.1";
  doc["peers"][2]["port"] = 29501;
  const std::string e = parse_error(doc);
  CHECK(contains(e, "hosts.json: peers[2]: address 127.0.0.1:29501 is also peers[1]'s"));
  doc["peers"][2]["port"] = 29502;
  CHECK(parse_error(doc).empty());
}

TEST_CASE("hosts: load_hosts errors and a write/load round trip") {
  TempDir dir;
  const std::string missing = (dir.path / "missing.json").string();
  try {
    dpg::net::load_hosts(missing);
    FAIL("expected an error");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::not_found);
    CHECK(contains(e.what(), missing));
  }

  const std::string broken = (dir.path / "broken.json").string();
  { std::ofstream(broken) << "{\"peers\": [ {\"rank\": 0,"; }
  try {
    dpg::net::load_hosts(broken);
    FAIL("expected an error");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::invalid_argument);
    CHECK(contains(e.what(), broken));
  }

  const std::string invalid = (dir.path / "invalid.json").string();
  { std::ofstream(invalid) << R"({"peers": [{"rank": 0, "host": "a"}]})"; }
  try {
    dpg::net::load_hosts(invalid);
    FAIL("expected an error");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::invalid_argument);
    CHECK(contains(e.what(), invalid + ": peers[0].port: missing"));
  }

  HostsFile h = dpg::net::parse_hosts(three_peers(), "in code");
  h.secret = "token-token-token-token";
  h.topology = Json{{"kind", "ring"}, {"degree", 2}};
  const std::string path = (dir.path / "hosts.json").string();
  dpg::net::write_hosts(h, path);
  const HostsFile back = dpg::net::load_hosts(path);
  CHECK(back.source == path);
  REQUIRE(back.world() == 3);
  for (int r = 0; r < 3; ++r) {
    CHECK(back.peers[r].rank == r);
    CHECK(back.peers[r].host == h.peers[r].host);
    CHECK(back.peers[r].port == h.peers[r].port);
  }
  CHECK(back.secret == "token-token-token-token");
  CHECK(back.topology == h.topology);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) files += e.path().filename() == "hosts.json" ? 1 : 0;
  CHECK(files == 1);
}

TEST_CASE("hosts: local_hosts gives n peers on 127.0.0.1 with distinct ports") {
  for (int n : {1, 2, 16}) {
    const HostsFile h = dpg::net::local_hosts(n);
    REQUIRE(h.world() == n);
    std::set<int> ports;
    for (int r = 0; r < n; ++r) {
      CHECK(h.peers[r].rank == r);
      CHECK(h.peers[r].host == "127.0.0.1");
      CHECK(h.peers[r].port > 0);
      ports.insert(h.peers[r].port);
    }
    CHECK(static_cast<int>(ports.size()) == n);
    // The result is itself a valid hosts file.
    CHECK_NOTHROW(dpg::net::parse_hosts(dpg::net::to_json(h), "local"));
  }
  CHECK_THROWS_AS(dpg::net::local_hosts(0), dpg::Error);
}

TEST_CASE("hosts: resolve_rank from the flag and from each launcher variable") {
  CleanRankEnv env;
  CHECK(dpg::net::resolve_rank(2, 4) == 2);
  CHECK(contains(rank_error(4, 4), "--rank 4 is out of range (4 peers take ranks 0..3)"));
  CHECK(contains(rank_error(-1, 4), "--rank -1 is out of range"));

  const std::string none = rank_error(std::nullopt, 4);
  CHECK(contains(none, "pass --rank"));
  for (const char* n : CleanRankEnv::kNames) CHECK(contains(none, n));

  for (const char* name : CleanRankEnv::kNames) {
    CAPTURE(name);
    CleanRankEnv::clear();
    ::setenv(name, "3", 1);
    CHECK(dpg::net::resolve_rank(std::nullopt, 4) == 3);
    CHECK(dpg::net::resolve_rank(1, 4) == 1);  // the flag wins
    ::setenv(name, "4", 1);
    const std::string range = rank_error(std::nullopt, 4);
    CHECK(contains(range, std::string(name) + "=4 is out of range (4 peers take ranks 0..3)"));
    ::setenv(name, "two", 1);
    CHECK(contains(rank_error(std::nullopt, 4), std::string(name) + "=\"two\" is not an integer"));
    ::setenv(name, "1x", 1);
    CHECK(contains(rank_error(std::nullopt, 4), std::string(name) + "=\"1x\" is not an integer"));
    ::setenv(name, "", 1);
    CHECK(contains(rank_error(std::nullopt, 4), std::string(name) + "=\"\" is not an integer"));
  }

  // The first variable set in the documented order wins.
  CleanRankEnv::clear();
  ::setenv("RANK", "0", 1);
  ::setenv("SLURM_PROCID", "1", 1);
  ::setenv("PMI_RANK", "2", 1);
  CHECK(dpg::net::resolve_rank(std::nullopt, 4) == 2);
  ::setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  CHECK(dpg::net::resolve_rank(std::nullopt, 4) == 3);
}

TEST_CASE("hosts: is_local_host") {
  CHECK(dpg::net::is_local_host("localhost"));
  CHECK(dpg::net::is_local_host("LocalHost"));
  CHECK(dpg::net::is_local_host("127.0.0.1"));
  CHECK(dpg::net::is_local_host("127.1.2.3"));
  CHECK(dpg::net::is_local_host("::1"));
  CHECK(dpg::net::is_local_host("::ffff:127.0.0.1"));
  char self[256] = {};
  REQUIRE(::gethostname(self, sizeof self - 1) == 0);
  CHECK(dpg::net::is_local_host(self));
  CHECK_FALSE(dpg::net::is_local_host(""));
  CHECK_FALSE(dpg::net::is_local_host("192.0.2.77"));  // TEST-NET-1, never assigned
  CHECK_FALSE(dpg::net::is_local_host("2001:db8::77"));
  CHECK_FALSE(dpg::net::is_local_host("no-such-host.invalid"));
  CHECK_FALSE(dpg::net::is_local_host("128.0.0.1"));
}

TEST_CASE("hosts: a world past kMaxWorld is refused before its peers are parsed") {
  Json peers = Json::array();
  for (int r = 0; r <= dpg::net::kMaxWorld; ++r)
    peers.push_back({{"rank", r}, {"host", "10.0.0.1"}, {"port", 1024 + r % 60000}});
  const std::string msg = parse_error(Json{{"peers", peers}});
  CHECK(contains(msg, "hosts.json"));
  CHECK(contains(msg, "at most 65536"));
}
