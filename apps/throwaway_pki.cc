#include "apps/throwaway_pki.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include "runtime/core/error.h"

namespace dpg::app {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free_all(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Free>;
using Cert = std::unique_ptr<X509, Free>;

void check(bool ok, const std::string& what) {
  if (!ok) fail(Code::internal, "making the benchmark's TLS certificates: " + what + " failed");
}

Key new_key() {
  Key k(EVP_EC_gen("P-256"));
  check(k != nullptr, "generating a P-256 key");
  return k;
}

void add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  check(ext != nullptr, std::string("the extension ") + value);
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  check(added == 1, std::string("adding the extension ") + value);
}

// A certificate for `key` named `cn`, signed by issuer_key (self-signed when issuer is null).
Cert new_cert(EVP_PKEY* key, const char* cn, X509* issuer, EVP_PKEY* issuer_key, long serial) {
  Cert c(X509_new());
  check(c != nullptr, "X509_new");
  check(X509_set_version(c.get(), 2) == 1, "setting the version");
  check(ASN1_INTEGER_set(X509_get_serialNumber(c.get()), serial) == 1, "setting the serial");
  check(X509_gmtime_adj(X509_getm_notBefore(c.get()), -60) != nullptr, "setting notBefore");
  check(X509_gmtime_adj(X509_getm_notAfter(c.get()), 24 * 3600) != nullptr, "setting notAfter");
  check(X509_set_pubkey(c.get(), key) == 1, "setting the public key");
  X509_NAME* name = X509_get_subject_name(c.get());
  check(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                   reinterpret_cast<const unsigned char*>(cn), -1, -1, 0) == 1,
        "setting the name");
  X509* signer = issuer != nullptr ? issuer : c.get();
  check(X509_set_issuer_name(c.get(), X509_get_subject_name(signer)) == 1, "setting the issuer");
  if (issuer == nullptr) {
    add_extension(c.get(), signer, NID_basic_constraints, "critical,CA:TRUE");
    add_extension(c.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    add_extension(c.get(), signer, NID_basic_constraints, "critical,CA:FALSE");
    add_extension(c.get(), signer, NID_key_usage, "critical,digitalSignature");
    add_extension(c.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth");
  }
  check(X509_sign(c.get(), issuer_key, EVP_sha256()) > 0, "signing");
  return c;
}

void write_pem(const std::string& path, X509* cert, EVP_PKEY* key) {
  std::unique_ptr<BIO, Free> out(BIO_new_file(path.c_str(), "w"));
  if (!out) fail(Code::unavailable, "cannot write " + path);
  const bool ok = cert != nullptr
                      ? PEM_write_bio_X509(out.get(), cert) == 1
                      : PEM_write_bio_PrivateKey(out.get(), key, nullptr, nullptr, 0, nullptr,
                                                 nullptr) == 1;
  if (!ok || BIO_flush(out.get()) != 1) fail(Code::unavailable, "writing " + path + " failed");
}

}  // namespace

void make_throwaway_pki(const std::string& dir, net::HostsFile& hosts) {
  const Key ca_key = new_key();
  const Cert ca = new_cert(ca_key.get(), "dpgossip benchmark CA", nullptr, ca_key.get(), 1);
  const Key peer_key = new_key();
  const Cert peer = new_cert(peer_key.get(), "dpgossip benchmark peer", ca.get(), ca_key.get(), 2);
  hosts.tls = {dir + "/ca.pem", dir + "/peer.pem", dir + "/peer.key"};
  write_pem(hosts.tls.ca_file, ca.get(), nullptr);
  write_pem(hosts.tls.cert_file, peer.get(), nullptr);
  write_pem(hosts.tls.key_file, nullptr, peer_key.get());
}

}  // namespace dpg::app
