// A throwaway certificate authority for `bench allreduce --peers N --tls`, made in this process
// with OpenSSL's libcrypto: every peer of the benchmark runs on this machine and lives for one
// command, so one CA and one certificate for all of them are enough to measure what TLS costs.
#pragma once

#include <string>

#include "runtime/net/hosts.h"

namespace dpg::app {

// Writes ca.pem, peer.pem and peer.key (a P-256 key, certificates valid for a day) into `dir`,
// which should be private to this user, and points hosts.tls at them.
void make_throwaway_pki(const std::string& dir, net::HostsFile& hosts);

}  // namespace dpg::app
