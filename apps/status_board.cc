#include "apps/status_board.h"

#include <cmath>
#include <sstream>
#include <tuple>
#include <utility>

namespace dpg::app {
namespace {

// A label value in Prometheus's text format: backslash, double quote and newline escaped.
std::string label_value(const std::string& s) {
  std::string out;
  for (const char ch : s) {
    if (ch == '\\') out += "\\\\";
    else if (ch == '"') out += "\\\"";
    else if (ch == '\n') out += "\\n";
    else out += ch;
  }
  return out;
}

// A sample value: Prometheus spells the non-finite ones +Inf, -Inf and NaN.
std::string sample_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

// A number from a metrics line; JSON has no infinity, so an epsilon without DP is written
// null there (the summary's "epsilon": null) and read back as +Inf.
double number(const Json& line, const char* key) {
  if (!line.is_object() || !line.contains(key)) return std::nan("");
  const Json& v = line[key];
  if (v.is_number()) return v.get<double>();
  if (v.is_null()) return INFINITY;
  return std::nan("");
}

class Text {
 public:
  explicit Text(std::string run) : run_(label_value(run)) {}
  void family(const char* name, const char* type, const char* help) {
    name_ = name;
    out_ << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  }
  void sample(double v, const std::string& labels = "") {
    out_ << name_ << "{run=\"" << run_ << '"' << (labels.empty() ? "" : ",") << labels << "} "
         << sample_value(v) << '\n';
  }
  std::string str() const { return out_.str(); }

 private:
  std::string run_, name_;
  std::ostringstream out_;
};

std::string peer_label(const Json& p) { return "peer=\"" + std::to_string(p["rank"].get<int>()) + '"'; }

// Each peer's figures from the status feed (StatusBoard::live_peers).
void live_metrics(Text& t, const Json& live) {
  if (!live.is_array()) return;
  auto per_peer = [&](const char* name, const char* type, const char* help, const char* key) {
    t.family(name, type, help);
    for (const Json& p : live) {
      if (p.contains(key) && p[key].is_number()) t.sample(p[key].get<double>(), peer_label(p));
    }
  };
  per_peer("dpgossip_peer_step", "gauge", "Each peer's step, as it last told rank 0.", "step");
  per_peer("dpgossip_peer_last_heard_seconds", "gauge",
           "Seconds since rank 0 last heard from each peer (its status feed).", "last_heard_s");
  per_peer("dpgossip_peer_bytes_sent_total", "counter", "Bytes each peer's links have sent.",
           "bytes_sent");
  per_peer("dpgossip_peer_bytes_received_total", "counter",
           "Bytes each peer's links have received.", "bytes_received");
  per_peer("dpgossip_peer_blocked_seconds_total", "counter",
           "Seconds each peer's training thread has been blocked waiting on its links.",
           "blocked_s");
  per_peer("dpgossip_peer_in_flight_seconds_total", "counter",
           "Seconds some message of each peer's step was in flight.", "in_flight_s");
  t.family("dpgossip_link_bytes_sent_total", "counter", "Bytes sent over each link, by its sender.");
  for (const Json& p : live) {
    if (!p.contains("links")) continue;
    for (const Json& l : p["links"]) {
      t.sample(l["bytes_sent"].get<double>(), "from=\"" + std::to_string(p["rank"].get<int>()) +
                                                  "\",to=\"" +
                                                  std::to_string(l["peer"].get<int>()) + '"');
    }
  }
}

}  // namespace

void StatusBoard::start(Json facts, PeerEpsilons peer_epsilons) {
  const std::lock_guard<std::mutex> lock(mutex_);
  facts_ = std::move(facts);
  peer_epsilons_ = std::move(peer_epsilons);
}

void StatusBoard::on_step(long long step) {
  step_.store(step);
  last_step_ns_.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start_).count());
}

void StatusBoard::add_epoch(const Json& line) {
  const std::lock_guard<std::mutex> lock(mutex_);
  epochs_.push_back(line);
}

void StatusBoard::add_consensus(const Json& line) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (consensus_.size() >= kConsensusKept) {
    consensus_.erase(consensus_.begin(), consensus_.begin() + kConsensusKept / 2);
    consensus_dropped_ += kConsensusKept / 2;
  }
  consensus_.push_back(line);
}

void StatusBoard::finish(const Json& summary) {
  const std::lock_guard<std::mutex> lock(mutex_);
  summary_ = summary;
  // The last step hook came before the last step: the summary's count is the one to show.
  if (summary.contains("steps") && summary["steps"].is_number_integer()) {
    step_.store(summary["steps"].get<long long>());
  }
}

void StatusBoard::fail(const std::string& why) {
  const std::lock_guard<std::mutex> lock(mutex_);
  failure_ = why.empty() ? "failed" : why;
}

void StatusBoard::peer_figures(int rank, PeerFigures figures) {
  const auto now = Clock::now();
  const std::lock_guard<std::mutex> lock(mutex_);
  if (heard_.empty()) heard_.resize(figures.sent.size());
  if (rank < 0 || static_cast<std::size_t>(rank) >= heard_.size() ||
      figures.sent.size() != heard_.size()) {
    return;
  }
  Heard& h = heard_[static_cast<std::size_t>(rank)];
  if (h.heard) {
    h.before = std::move(h.last);
    h.twice = true;
  }
  h.last = std::move(figures);
  h.heard = true;
  h.at = now;
}

Json StatusBoard::live() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return heard_.empty() ? restored_live_ : live_peers(Clock::now());
}

void StatusBoard::restore_live(Json live) {
  const std::lock_guard<std::mutex> lock(mutex_);
  restored_live_ = std::move(live);
}

Json StatusBoard::live_peers(Clock::time_point now) const {
  Json out = Json::array();
  for (std::size_t r = 0; r < heard_.size(); ++r) {
    const Heard& h = heard_[r];
    Json p{{"rank", r}};
    if (!h.heard) {
      p["state"] = "not heard from";
      out.push_back(std::move(p));
      continue;
    }
    const PeerFigures& f = h.last;
    const double ago = std::chrono::duration<double>(now - h.at).count();
    p["last_heard_s"] = ago;
    p["step"] = f.step;
    p["state"] = f.finished                                   ? "finished"
                 : ago > kSilentAfter.count()                 ? "silent"
                 : f.waiting_on >= 0 && f.waiting_s >= 1.0    ? "waiting"
                                                              : "running";
    p["waiting_on"] = f.waiting_on >= 0 ? Json(f.waiting_on) : Json(nullptr);
    p["waiting_s"] = f.waiting_s;
    p["clock_s"] = f.clock_s;
    p["in_flight_s"] = f.in_flight_s;
    p["blocked_s"] = f.blocked_s;
    double sent = 0, received = 0;
    for (const double b : f.sent) sent += b;
    for (const double b : f.received) received += b;
    p["bytes_sent"] = sent;
    p["bytes_received"] = received;
    // Rates over the interval between the last two figures, on the peer's own clock.
    const double dt = h.twice ? f.clock_s - h.before.clock_s : 0;
    const bool rates = dt > 0;
    p["interval_s"] = rates ? Json(dt) : Json(nullptr);
    p["steps_per_second"] =
        rates ? Json(static_cast<double>(f.step - h.before.step) / dt) : Json(nullptr);
    p["in_flight_share"] = rates ? Json((f.in_flight_s - h.before.in_flight_s) / dt) : Json(nullptr);
    p["blocked_share"] = rates ? Json((f.blocked_s - h.before.blocked_s) / dt) : Json(nullptr);
    Json links = Json::array();
    for (std::size_t q = 0; q < f.sent.size(); ++q) {
      if (f.sent[q] == 0 && f.received[q] == 0) continue;
      links.push_back({{"peer", q},
                       {"bytes_sent", f.sent[q]},
                       {"bytes_received", f.received[q]},
                       {"sent_per_second",
                        rates ? Json((f.sent[q] - h.before.sent[q]) / dt) : Json(nullptr)}});
    }
    p["links"] = std::move(links);
    out.push_back(std::move(p));
  }
  return out;
}

Json StatusBoard::peer_epsilons_at(long long step, const Json& summary,
                                   const PeerEpsilons& compute) const {
  const bool ended = !summary.is_null() && summary.contains("peer_epsilons");
  const long long at = ended ? summary.value("steps", step) : step;
  Json computed;
  long long computed_at = at;
  if (compute) {
    const std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto now = Clock::now();
    // Before the first step nothing is spent: the first figure after it comes at once; at the
    // end, once more for the last step.
    if (cached_step_ <= 0 ||
        (at != cached_step_ && (ended || now - cached_at_ >= kPeerEpsilonsEvery))) {
      cached_epsilons_ = compute(at);
      cached_step_ = at;
      cached_at_ = now;
    }
    computed = cached_epsilons_;
    computed_at = cached_step_;
  }
  const bool have = computed.is_object();
  Json out{{"step", ended ? at : computed_at}};
  out["epsilons"] = ended ? summary["peer_epsilons"] : have ? computed["data"] : Json(nullptr);
  out["message_epsilons"] = have ? computed["messages"] : Json(nullptr);
  if (out["epsilons"].is_null() && out["message_epsilons"].is_null()) return nullptr;
  return out;
}

Json StatusBoard::status() const {
  const long long step = step_.load();
  const long long last_ns = last_step_ns_.load();
  const double wall_s = std::chrono::duration<double>(Clock::now() - start_).count();
  Json summary;
  PeerEpsilons compute;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    summary = summary_;
    compute = peer_epsilons_;
  }
  const Json peers = peer_epsilons_at(step, summary, compute);
  const std::lock_guard<std::mutex> lock(mutex_);
  Json s;
  s["facts"] = facts_;
  s["state"] = !failure_.empty()            ? "failed"
               : facts_.is_null()           ? "starting"
               : summary_.is_null()         ? "running"
               : summary_["kind"] == "stopped" ? "stopped"
                                            : "finished";
  if (!failure_.empty()) s["failure"] = failure_;
  s["step"] = step;
  s["wall_s"] = wall_s;
  s["seconds_since_step"] = last_ns < 0 ? Json(nullptr) : Json(wall_s - last_ns * 1e-9);
  s["peer_epsilons"] = peers.is_null() ? Json(nullptr) : peers["epsilons"];
  s["peer_message_epsilons"] = peers.is_null() ? Json(nullptr) : peers["message_epsilons"];
  s["peer_epsilons_step"] = peers.is_null() ? Json(nullptr) : peers["step"];
  s["epochs"] = epochs_;
  s["consensus"] = consensus_;
  s["consensus_dropped"] = consensus_dropped_;
  s["summary"] = summary_;
  s["live"] = heard_.empty() ? restored_live_ : live_peers(Clock::now());
  return s;
}

std::string StatusBoard::prometheus() const {
  const Json s = status();
  const Json facts = s["facts"].is_null() ? Json::object() : s["facts"];
  Text t(facts.value("run", std::string()));
  const Json last_epoch = s["epochs"].empty() ? Json() : s["epochs"].back();
  const Json& summary = s["summary"];
  // The latest released figures: the summary's at the end, else the last epoch line's.
  const Json& latest = summary.is_null() ? last_epoch : summary;

  t.family("dpgossip_peers", "gauge", "Peers in the run.");
  if (facts.contains("peers")) t.sample(facts.value("peers", 0));
  t.family("dpgossip_steps", "gauge", "Steps rank 0 has taken.");
  t.sample(static_cast<double>(s["step"].get<long long>()));
  t.family("dpgossip_planned_steps", "gauge", "Steps the run is planned for.");
  if (facts.contains("privacy")) t.sample(facts["privacy"].value("steps", 0.0));
  t.family("dpgossip_epochs", "gauge", "Epochs reported so far.");
  t.sample(static_cast<double>(s["epochs"].size()));
  t.family("dpgossip_epsilon", "gauge",
           "Epsilon spent so far at the plan's delta, as last released: for one peer's data in "
           "the released model, and in one peer's messages (+Inf without DP).");
  if (!latest.is_null()) {
    t.sample(number(latest, "epsilon"), "released=\"model\"");
    t.sample(number(latest, "message_epsilon"), "released=\"messages\"");
  }
  // Each peer's epsilons, +Inf where one is not a number (no DP).
  for (const auto& [name, key, help] :
       {std::tuple{"dpgossip_peer_epsilon", "peer_epsilons", "Each peer's epsilon for its own data."},
        std::tuple{"dpgossip_peer_message_epsilon", "peer_message_epsilons",
                   "Each peer's epsilon for its own data in its own messages."}}) {
    t.family(name, "gauge", help);
    if (!s[key].is_array()) continue;
    for (std::size_t r = 0; r < s[key].size(); ++r) {
      const Json& v = s[key][r];
      t.sample(v.is_number() ? v.get<double>() : INFINITY, "peer=\"" + std::to_string(r) + "\"");
    }
  }
  t.family("dpgossip_samples_per_second", "gauge", "Training throughput, as last released.");
  if (!latest.is_null()) t.sample(number(latest, "samples_per_second"));
  t.family("dpgossip_test_accuracy", "gauge", "The released model's accuracy, as last released.");
  if (!latest.is_null()) t.sample(number(latest, "test_accuracy"));
  t.family("dpgossip_consensus_distance", "gauge",
           "The spread of the peers' models, as last released (replicas that differ only).");
  const Json last_consensus = s["consensus"].empty() ? last_epoch : s["consensus"].back();
  const double spread = number(last_consensus, "consensus_distance");
  if (std::isfinite(spread) && spread >= 0) t.sample(spread);
  live_metrics(t, s["live"]);
  t.family("dpgossip_running", "gauge", "1 while the run trains, 0 once it has ended.");
  t.sample(s["state"] == "running" ? 1 : 0);
  t.family("dpgossip_failures", "gauge", "1 when the run failed (the page says why).");
  t.sample(s["state"] == "failed" ? 1 : 0);
  return t.str();
}

}  // namespace dpg::app
