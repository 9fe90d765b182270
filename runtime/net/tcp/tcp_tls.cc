// TLS for the transport (--tls): one context per peer, built from the hosts file's files, used
// for both ends of its connections. Every peer verifies the other's certificate against the CA,
// so only holders of a key the CA signed may join; host names are not checked (the CA, not DNS,
// says who belongs to the cluster; docs/SECURITY.md).
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "runtime/net/tcp/tcp_impl.h"

namespace dpg::net {
namespace {

using boost::system::error_code;

// A clear error before OpenSSL's: the file is missing or unreadable.
void require_readable(const std::string& path, const std::string& field) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fail(errno == ENOENT ? Code::not_found : Code::failed_precondition,
         field + ": " + path + ": cannot read (" + std::strerror(errno) + ")");
  }
}

void check(const error_code& ec, const std::string& path, const std::string& field,
           const std::string& what) {
  if (ec) {
    fail(Code::invalid_argument, field + ": " + path + ": not " + what + " (" + ec.message() + ")");
  }
}

// Whether the PEM file at `path` holds an encrypted key (PKCS#8 "ENCRYPTED PRIVATE KEY", or a
// legacy "Proc-Type: 4,ENCRYPTED" header), from its first 64 KiB.
bool encrypted_pem(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(64 * 1024, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  return head.find("ENCRYPTED") != std::string::npos;
}

}  // namespace

std::unique_ptr<asio::ssl::context> make_tls_context(const HostsFile& hosts, int rank) {
  const TlsPaths files = tls_paths(hosts, rank);
  require_readable(files.ca, files.ca_field);
  require_readable(files.cert, files.cert_field);
  require_readable(files.key, files.key_field);
  auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls);
  // Every peer runs this same code, so nothing older than TLS 1.3 is ever needed.
  if (SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_3_VERSION) != 1) {
    fail(Code::internal, "OpenSSL refused to set TLS 1.3 as the minimum version");
  }
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_compression);
  // No passphrase is ever asked for: OpenSSL's default would prompt on the terminal and wait.
  SSL_CTX_set_default_passwd_cb(ctx->native_handle(),
                                [](char*, int, int, void*) -> int { return -1; });
  error_code ec;
  ctx->load_verify_file(files.ca, ec);
  check(ec, files.ca, files.ca_field, "a PEM file of CA certificates");
  ctx->use_certificate_chain_file(files.cert, ec);
  check(ec, files.cert, files.cert_field, "a PEM certificate chain");
  ctx->use_private_key_file(files.key, asio::ssl::context::pem, ec);
  if (ec && encrypted_pem(files.key)) {
    ERR_clear_error();
    fail(Code::invalid_argument,
         files.key_field + ": " + files.key + " is an encrypted (passphrase-protected) private "
         "key, and dpgossip asks for no passphrase: give it the key unencrypted, readable by its "
         "owner only (openssl pkey -in KEY -out PLAIN.key; chmod 600 PLAIN.key)");
  }
  check(ec, files.key, files.key_field, "the unencrypted PEM private key of " + files.cert);
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    ERR_clear_error();
    fail(Code::invalid_argument, files.key_field + ": " + files.key +
                                     " is not the key of the certificate " + files.cert + " (" +
                                     files.cert_field + ")");
  }
  ctx->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  return ctx;
}

bool is_tls_error(const error_code& ec) {
  return ec.category() == asio::error::get_ssl_category();
}

std::string tls_message(const error_code& ec, Conn* c) {
  if (!is_tls_error(ec)) return ec.message();
  std::string m = "TLS: " + ec.message();
  const int reason = ERR_GET_REASON(static_cast<unsigned long>(ec.value()));
  if (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
      reason == SSL_R_HTTP_REQUEST) {
    m += " (the other end does not speak TLS: is it started without --tls?)";
  }
  if (c != nullptr && c->tls) {
    const long verdict = SSL_get_verify_result(c->tls->native_handle());
    if (verdict != X509_V_OK) m += std::string(" (") + X509_verify_cert_error_string(verdict) + ")";
  }
  return m;
}

}  // namespace dpg::net
