#include "apps/status_page.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <cmath>

#include "apps/status_report.h"
#include "runtime/core/error.h"

namespace dpg::app {
namespace {

// Points on the plan's curve of the model's epsilon against steps.
constexpr int kPlanPoints = 40;

// How rank 0 reaches rank r: the link make_transport built to it (with --transport nccl the
// algorithm's messages go through NCCL, the rest over that link), or none.
Json transport_of(const RunFacts& f, int r) {
  if (r == 0) return "this process";
  const auto has = [r](const std::vector<int>& v) {
    return std::find(v.begin(), v.end(), r) != v.end();
  };
  const char* link = f.links == nullptr          ? nullptr
                     : has(f.links->shm_peers)  ? "shm"
                     : has(f.links->tcp_peers)  ? "tcp"
                                                : nullptr;
  if (link == nullptr) return nullptr;  // rank 0 exchanges nothing with it
  return f.config->transport == TransportMode::nccl ? std::string("nccl + ") + link : link;
}

Json graphs_of(const std::vector<train::GossipPhase>& phases) {
  Json out = Json::array();
  for (const train::GossipPhase& p : phases) {
    const topology::Topology& g = p.period.front();
    Json edges = Json::array();
    for (int i = 0; i < g.peers(); ++i) {
      for (const int j : g.neighbourhood(i).send_to) {
        if (g.symmetric() && j < i) continue;  // one line per undirected edge
        edges.push_back({i, j});
      }
    }
    out.push_back({{"label", p.label},
                   {"start_round", p.start_round},
                   {"period", p.period.size()},
                   {"rho", p.spectrum.rho},
                   {"spectral_gap", p.spectrum.spectral_gap},
                   {"edges", std::move(edges)}});
  }
  return out;
}

bool token_matches(const std::string& token, const std::string& authorization) {
  const std::string want = "Bearer " + token;
  return authorization.size() == want.size() &&
         CRYPTO_memcmp(authorization.data(), want.data(), want.size()) == 0;
}

}  // namespace

Json status_facts(const RunFacts& f) {
  const TrainConfig& c = *f.config;
  const dp::PrivacyPlan& plan = *f.plan;
  Json j;
  j["run"] = f.run;
  j["algo"] = to_string(c.algo);
  j["peers"] = f.world;
  j["peers_in_step"] = f.synchronous && f.world > 1;
  Json peers = Json::array();
  for (int r = 0; r < f.world; ++r) {
    Json p{{"rank", r}};
    // Its expected batch, its sampling rate times its examples (public, as both are): the
    // page's samples/s for it is its steps/s times this.
    const auto i = static_cast<std::size_t>(r);
    if (i < plan.peer_q.size() && i < plan.shard_rows.size()) {
      p["expected_batch"] = plan.peer_q[i] * plan.shard_rows[i];
    }
    if (f.hosts != nullptr && !f.hosts->peers.empty()) {
      p["host"] = f.hosts->peers[static_cast<std::size_t>(r)].host;
      p["transport"] = transport_of(f, r);
    } else {
      p["host"] = "this process";
    }
    peers.push_back(std::move(p));
  }
  j["peer_list"] = std::move(peers);
  // The config as the peers share it, less the noise seed: a seed given to reproduce a run
  // would let a reader of the page recompute the noise.
  Json config = to_json(c);
  config.erase("noise_seed");
  j["config"] = std::move(config);
  j["graphs"] = f.phases != nullptr ? graphs_of(*f.phases) : Json::array();
  Json privacy;
  privacy["dp"] = c.dp;
  privacy["delta"] = plan.delta;
  privacy["target_epsilon"] = c.dp && c.target_epsilon > 0 ? Json(c.target_epsilon) : Json(nullptr);
  privacy["steps"] = plan.steps;
  privacy["noise_multiplier"] = plan.model_sigma;
  privacy["noise_mode"] = plan.noise_mode;
  Json curve = Json::array();
  if (c.dp && plan.steps > 0) {
    for (int i = 1; i <= kPlanPoints; ++i) {
      const long long t = std::max<long long>(1, plan.steps * i / kPlanPoints);
      curve.push_back({t, plan.model_after(t).epsilon});
    }
  }
  privacy["plan"] = std::move(curve);
  j["privacy"] = std::move(privacy);
  j["environment"] = run_environment();  // where rank 0 runs, at the start
  return j;
}

http::Response answer_status(const StatusBoard& board, const std::string& token,
                             const http::Request& request) {
  const std::string path = request.target.substr(0, request.target.find('?'));
  if (path == "/" || path == "/index.html") {
    // The page holds no data of the run: it fetches it with the token (#token=... in its address).
    return {200, "text/html; charset=utf-8", status_html()};
  }
  if (path != "/api/status" && path != "/metrics") return {404, "text/plain; charset=utf-8", "not found\n"};
  if (!token.empty() && !token_matches(token, request.authorization)) {
    return {401, "text/plain; charset=utf-8", "a bearer token is needed (the cluster secret)\n"};
  }
  if (path == "/metrics") {
    return {200, "text/plain; version=0.0.4; charset=utf-8", board.prometheus()};
  }
  // A run name that is not UTF-8 must not fail the answer.
  return {200, "application/json",
          board.status().dump(-1, ' ', false, Json::error_handler_t::replace) + "\n"};
}

StatusPage::StatusPage(const std::optional<StatusListen>& serve) {
  if (!serve) return;
  const StatusListen& listen = *serve;
  token_ = listen.token;
  if (listen.address != "127.0.0.1" && listen.address != "::1" && token_.empty()) {
    fail(Code::invalid_argument,
         "train: --status-address " + listen.address + " serves the page beyond this machine, "
         "which needs the cluster secret as its token: give a hosts file with a secret");
  }
  http::ServerOptions o;
  o.address = listen.address;
  o.port = listen.port;
  server_ = std::make_unique<http::Server>(
      o, [this](const http::Request& r) { return answer_status(board_, token_, r); });
}

}  // namespace dpg::app
