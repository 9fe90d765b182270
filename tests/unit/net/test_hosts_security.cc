// The hosts file's security fields: where the cluster secret comes from (DPGOSSIP_SECRET, then
// secret_file, then secret), its minimum length, and the TLS file paths of each peer.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/core/error.h"
#include "runtime/net/hosts.h"

namespace fs = std::filesystem;
using dpg::Json;
using dpg::net::HostsFile;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

struct Scratch {
  fs::path path;
  Scratch() {
    std::string tmpl = (fs::temp_directory_path() / "dpg_test_secret_XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~Scratch() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = (path / name).string();
    std::ofstream(p) << text;
    return p;
  }
};

// DPGOSSIP_SECRET unset for the test (and restored to unset afterwards).
struct NoSecretEnv {
  NoSecretEnv() { ::unsetenv(dpg::net::kSecretVariable); }
  ~NoSecretEnv() { ::unsetenv(dpg::net::kSecretVariable); }
};

Json two_peers() {
  return {{"peers",
           {{{"rank", 0}, {"host", "127.0.0.1"}, {"port", 29500}},
            {{"rank", 1}, {"host", "127.0.0.1"}, {"port", 29501}}}}};
}

std::string load_error(const std::string& path) {
  try {
    dpg::net::load_hosts(path);
  } catch (const dpg::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("hosts secret: the environment, then secret_file, then secret") {
  NoSecretEnv env;
  Scratch dir;
  Json doc = two_peers();
  doc["secret_file"] = "key.txt";  // relative: beside the hosts file
  dir.write("key.txt", "0123456789abcdef0123\n");
  const std::string path = dir.write("hosts.json", doc.dump());
  HostsFile h = dpg::net::load_hosts(path);
  CHECK(h.secret == "0123456789abcdef0123");  // the trailing newline dropped
  CHECK(contains(h.secret_origin, "key.txt (" + path + ": secret_file)"));
  CHECK(dpg::net::to_json(h)["secret_file"] == "key.txt");
  CHECK_FALSE(dpg::net::to_json(h).contains("secret"));

  ::setenv(dpg::net::kSecretVariable, "from-the-environment-0123", 1);
  h = dpg::net::load_hosts(path);
  CHECK(h.secret == "from-the-environment-0123");
  CHECK(h.secret_origin == "DPGOSSIP_SECRET");
  ::setenv(dpg::net::kSecretVariable, "", 1);  // empty: as if unset
  CHECK(dpg::net::load_hosts(path).secret == "0123456789abcdef0123");

  Json inline_doc = two_peers();
  inline_doc["secret"] = "inline-secret-0123456";
  ::setenv(dpg::net::kSecretVariable, "from-the-environment-0123", 1);
  const HostsFile from_env = dpg::net::load_hosts(dir.write("inline.json", inline_doc.dump()));
  CHECK(from_env.secret == "from-the-environment-0123");
  CHECK_FALSE(dpg::net::to_json(from_env).contains("secret"));  // never written out
}

TEST_CASE("hosts secret: errors name where the secret came from, never the secret") {
  NoSecretEnv env;
  Scratch dir;
  Json doc = two_peers();
  doc["secret"] = "short";
  std::string e = load_error(dir.write("short.json", doc.dump()));
  CHECK(contains(e, "short.json: secret: the cluster secret is 5 bytes; it needs at least 16"));
  CHECK_FALSE(contains(e, "\"short\""));

  doc = two_peers();
  doc["secret"] = "long-enough-secret-1";
  doc["secret_file"] = "key.txt";
  CHECK(contains(load_error(dir.write("both.json", doc.dump())),
                 "both.json: secret_file: give secret or secret_file, not both"));

  doc = two_peers();
  doc["secret_file"] = "absent.txt";
  e = load_error(dir.write("absent.json", doc.dump()));
  CHECK(contains(e, "absent.json: secret_file: "));
  CHECK(contains(e, "absent.txt: cannot read"));

  dir.write("two_lines.txt", "first-line-of-the-key\nsecond-line\n");
  doc["secret_file"] = "two_lines.txt";
  CHECK(contains(load_error(dir.write("lines.json", doc.dump())), "more than one line"));

  dir.write("tiny.txt", "tiny\n");
  doc["secret_file"] = "tiny.txt";
  e = load_error(dir.write("tiny.json", doc.dump()));
  CHECK(contains(e, "tiny.txt (" + (dir.path / "tiny.json").string() +
                        ": secret_file): the cluster secret is 4 bytes"));

  ::setenv(dpg::net::kSecretVariable, "tiny", 1);
  CHECK(contains(load_error(dir.write("ok.json", two_peers().dump())),
                 "DPGOSSIP_SECRET: the cluster secret is 4 bytes"));
}

TEST_CASE("hosts tls: paths per peer or shared, relative to the file, missing ones named") {
  NoSecretEnv env;
  Scratch dir;
  Json doc = two_peers();
  doc["tls"] = {{"ca_file", "ca.pem"}, {"cert_file", "/etc/shared.pem"}, {"key_file", "shared.key"}};
  doc["peers"][1]["cert_file"] = "one.pem";
  doc["peers"][1]["key_file"] = "one.key";
  const std::string path = dir.write("hosts.json", doc.dump());
  const HostsFile h = dpg::net::load_hosts(path);
  const auto zero = dpg::net::tls_paths(h, 0);
  CHECK(zero.ca == (dir.path / "ca.pem").string());
  CHECK(zero.cert == "/etc/shared.pem");
  CHECK(zero.key == (dir.path / "shared.key").string());
  CHECK(zero.cert_field == path + ": tls.cert_file");
  const auto one = dpg::net::tls_paths(h, 1);
  CHECK(one.cert == (dir.path / "one.pem").string());
  CHECK(one.key_field == path + ": peers[1].key_file");
  CHECK(dpg::net::to_json(h) == doc);  // written back as it was

  Json no_ca = two_peers();
  no_ca["tls"] = {{"cert_file", "c.pem"}, {"key_file", "k.pem"}};
  const HostsFile missing = dpg::net::load_hosts(dir.write("no_ca.json", no_ca.dump()));
  try {
    dpg::net::tls_paths(missing, 0);
    FAIL("expected an error");
  } catch (const dpg::Error& e) {
    CHECK(e.code() == dpg::Code::invalid_argument);
    CHECK(contains(e.what(), "no_ca.json: tls.ca_file: missing; --tls needs"));
  }

  Json bad = two_peers();
  bad["tls"] = {{"ca", "x"}};
  CHECK(contains(load_error(dir.write("bad.json", bad.dump())), "tls.ca: unknown field"));
  bad["tls"] = {{"ca_file", ""}};
  CHECK(contains(load_error(dir.write("bad2.json", bad.dump())),
                 "tls.ca_file: expected a non-empty string"));
  bad = two_peers();
  bad["peers"][0]["cert_file"] = 3;
  CHECK(contains(load_error(dir.write("bad3.json", bad.dump())),
                 "peers[0].cert_file: expected a non-empty string"));
}
