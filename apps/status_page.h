// The live status page of a run (`train --status-port`; docs/STATUS.md): rank 0 serves the
// page, /api/status (JSON) and /metrics (Prometheus's text format) from a StatusBoard that its
// report hooks fill. Only public facts and what the run already releases reach the board.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/status_board.h"
#include "apps/transport_setup.h"
#include "dp/privacy_plan.h"
#include "runtime/core/train_config.h"
#include "runtime/http/server.h"
#include "runtime/net/hosts.h"
#include "runtime/train/gossip.h"

namespace dpg::app {

// The page itself: HTML with its script and style inline (status_html.cc).
const std::string& status_html();

// What the board says about the run before it starts: its name, algorithm and peers (rank,
// host, how rank 0 reaches it), the graphs with their spectra, and the privacy plan with its
// curve of epsilon against steps (every figure public: the config, the hosts file, the plan).
struct RunFacts {
  std::string run;
  const TrainConfig* config = nullptr;
  const net::HostsFile* hosts = nullptr;  // null or empty: one process
  int world = 1;
  const TransportPlan* links = nullptr;   // rank 0's links, as make_transport built them
  bool synchronous = true;                // the peers stay in step with rank 0
  const std::vector<train::GossipPhase>* phases = nullptr;
  const dp::PrivacyPlan* plan = nullptr;
};
Json status_facts(const RunFacts& facts);

// Answers one request: "/" the page, "/api/status" and "/metrics" the board (with a token set,
// only for "Authorization: Bearer TOKEN", compared in constant time), anything else 404.
http::Response answer_status(const StatusBoard& board, const std::string& token,
                             const http::Request& request);

// Where the page listens: 127.0.0.1 unless an address is given, which needs a token (the
// cluster secret) so that no one else on the network reads the run.
struct StatusListen {
  std::string address = "127.0.0.1";
  std::uint16_t port = 0;
  std::string token;
};

// The board and its server, for the run's lifetime: it listens from the start of the set-up
// (a port in use fails the run before any peer is connected), and shows the run once the
// board is started.
class StatusPage {
 public:
  // Without `listen`, the board alone (for a report of the run, with no page served).
  explicit StatusPage(const std::optional<StatusListen>& listen);
  StatusBoard& board() { return board_; }
  const StatusBoard& board() const { return board_; }
  bool serving() const { return server_ != nullptr; }
  std::uint16_t port() const { return server_ ? server_->port() : 0; }

 private:
  StatusBoard board_;
  std::string token_;
  std::unique_ptr<http::Server> server_;  // after the board: stopped before it goes
};

}  // namespace dpg::app
