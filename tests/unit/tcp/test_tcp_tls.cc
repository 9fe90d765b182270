// The transport over TLS (--tls): collectives through the TLS reader and writer, a peer whose
// certificate another CA signed is refused while the genuine one still joins, and every file
// problem is an error naming the file and the hosts file's field. The certificates come from
// tests/tls/make_certs.sh (the openssl program), made once into a temporary folder.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/unit/tcp/tcp_test_util.h"

using dpg::public_value;  // the tests' buffers are synthetic

using namespace std::chrono_literals;
using namespace dpg::net;
using dpg::test::run_tcp_on;
namespace fs = std::filesystem;

namespace {

// Two certificate authorities: "good" signs r0..r3, "other" signs a stranger's certificate.
struct Pki {
  fs::path dir;
  Pki() {
    std::string tmpl = (fs::temp_directory_path() / "dpg_test_tls_XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    dir = tmpl;
    const char* script = std::getenv("DPG_MAKE_CERTS");
    REQUIRE_MESSAGE(script != nullptr, "DPG_MAKE_CERTS (the path of make_certs.sh) is not set");
    for (const auto& [ca, names] : {std::pair{"good", "r0 r1 r2 r3"}, std::pair{"other", "r1"}}) {
      const std::string cmd = std::string("bash '") + script + "' '" + (dir / ca).string() +
                              "' " + names + " >/dev/null";
      REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, cmd);
    }
  }
  ~Pki() { fs::remove_all(dir); }
  std::string path(const std::string& ca, const std::string& file) const {
    return (dir / ca / file).string();
  }
  // A hosts file of n local peers, each with its own certificate of the good CA.
  HostsFile hosts(int n) const {
    HostsFile h = local_hosts(n);
    h.tls.ca_file = path("good", "ca.pem");
    for (int r = 0; r < n; ++r) {
      std::ostringstream cert, key;
      cert << "r" << r << ".pem";
      key << "r" << r << ".key";
      h.peers[r].cert_file = path("good", cert.str());
      h.peers[r].key_file = path("good", key.str());
    }
    return h;
  }
};

const Pki& pki() {
  static const Pki p;
  return p;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("tls: all-reduce over TLS with a secret, 4 peers, both progress modes") {
  for (bool thread : {false, true}) {
    CAPTURE(thread);
    TcpOptions o;
    o.timeout = 30s;
    o.tls = true;
    o.progress_thread = thread;
    HostsFile h = pki().hosts(4);
    h.secret = "tls-unit-test-secret-0123";
    auto errors = run_tcp_on(h, o, [](TcpTransport& t) {
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1001},
                                std::size_t{1} << 20}) {
        dpg::collective::Communicator c(t, {4096, 0, 3});
        std::vector<float> v(count);
        for (std::size_t i = 0; i < count; ++i) v[i] = float(t.rank()) + float(i % 5);
        c.allreduce(public_value(v));
        for (std::size_t i = 0; i < count; ++i) {
          if (v[i] != float(6 + 4 * int(i % 5))) {
            throw dpg::Error(dpg::Code::internal, "wrong sum at " + std::to_string(i));
          }
        }
      }
    });
    for (auto& e : errors) CHECK_MESSAGE(e == "", e);
  }
}

TEST_CASE("tls: a failed send's buffer is the caller's again, in both progress modes") {
  for (bool thread : {false, true}) {
    CAPTURE(thread);
    TcpOptions o;
    o.tls = true;
    o.progress_thread = thread;
    for (auto how : {dpg::test::GivenBack::wait_fails, dpg::test::GivenBack::unwinds}) {
      // Unwinding takes the buffer away with no wait to hand it over: a progress thread may be
      // writing from it at that moment (a race no transport can close), so only the caller's
      // own thread runs the I/O there.
      if (how == dpg::test::GivenBack::unwinds && thread) continue;
      CAPTURE(static_cast<int>(how));
      dpg::test::check_failed_send_detached(pki().hosts(2), o, how);
    }
  }
}

TEST_CASE("tls: a peer whose certificate another CA signed is refused; the genuine one joins") {
  HostsFile good = pki().hosts(2);
  TcpOptions o;
  o.tls = true;
  o.timeout = 10s;
  o.connect_timeout = 30s;
  dpg::test::RankZeroWaits zero(good, o);
  // The stranger trusts its own CA and presents a certificate rank 0's CA did not sign.
  HostsFile stranger = good;
  stranger.tls.ca_file = pki().path("other", "ca.pem");
  stranger.peers[1].cert_file = pki().path("other", "r1.pem");
  stranger.peers[1].key_file = pki().path("other", "r1.key");
  TcpOptions quick = o;
  quick.connect_timeout = 5s;
  std::string refused;
  try {
    TcpTransport t(stranger, 1, {0}, quick);
  } catch (const dpg::Error& e) {
    refused = e.what();
  }
  CAPTURE(refused);
  CHECK(contains(refused, "peer 0 at 127.0.0.1:"));
  CHECK(contains(refused, "TLS: "));

  const auto [error0, error1] = zero.genuine_join();
  CHECK_MESSAGE(error0.empty(), error0);
  CHECK_MESSAGE(error1.empty(), error1);
}

TEST_CASE("tls: missing, unreadable or mismatched files name the file and the field") {
  const HostsFile base = pki().hosts(2);
  auto error = [](const HostsFile& h) {
    TcpOptions o;
    o.tls = true;
    o.connect_timeout = 1s;
    try {
      TcpTransport t(h, 0, {1}, o);
    } catch (const dpg::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  HostsFile h = base;
  h.source = "hosts.json";
  h.peers[0].cert_file = "/nonexistent/r0.pem";
  std::string e = error(h);
  CHECK(contains(e, "hosts.json: peers[0].cert_file: /nonexistent/r0.pem: cannot read"));

  h = base;
  h.tls.ca_file.clear();
  CHECK(contains(error(h), "tls.ca_file: missing"));

  h = base;
  h.peers[0].key_file = pki().path("good", "r1.key");  // another certificate's key
  e = error(h);
  CHECK(contains(e, "peers[0].key_file"));
  CHECK(contains(e, "r1.key"));

  // An encrypted key is refused with a message, not a passphrase prompt on the terminal.
  h = base;
  const std::string locked = (pki().dir / "locked.key").string();
  const std::string cmd = "openssl pkey -in '" + pki().path("good", "r0.key") + "' -out '" +
                          locked + "' -aes256 -passout pass:secret 2>/dev/null";
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, cmd);
  h.peers[0].key_file = locked;
  e = error(h);
  CHECK(contains(e, "peers[0].key_file: " + locked + " is an encrypted (passphrase-protected)"));

  h = base;
  const std::string junk = (pki().dir / "junk.pem").string();
  std::ofstream(junk) << "not a certificate\n";
  h.tls.ca_file = junk;
  e = error(h);
  CHECK(contains(e, "tls.ca_file: " + junk + ": not a PEM file of CA certificates"));
}
