// What the live status page shows (docs/STATUS.md): the run's public facts, set once at the
// start, and what rank 0 releases as it trains (its step, the epoch and consensus lines, the
// summary). Nothing else reaches it, so the page shows only what the run already publishes.
// Written by rank 0's training thread, read by the page's server thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/core/json_io.h"

namespace dpg::app {

// One peer's live figures as its status feed sent them (apps/status_feed.h): counts since its
// feed started, on that peer's own clock.
struct PeerFigures {
  long long step = 0;
  double clock_s = 0;                  // the peer's clock at these figures
  double in_flight_s = 0;              // its step's transfers in flight (their union)
  double blocked_s = 0;                // its training thread blocked in waits
  int waiting_on = -1;                 // the peer that thread waits on now, or -1
  double waiting_s = 0;                // for how long
  bool finished = false;               // its last figures: its run ended well
  std::vector<double> sent, received;  // bytes to and from each peer
};

class StatusBoard {
 public:
  // Each peer's epsilon for its data after `step` steps, in rank order, in the released model
  // and in its own messages: {"data": [...], "messages": [...]}; null where it cannot be said
  // (then the page waits for the summary's figures, which give the model's alone).
  using PeerEpsilons = std::function<Json(long long step)>;

  // Until start(), the page says the run is being set up (connecting, calibrating).
  StatusBoard() = default;
  // facts: the run, its peers, graphs and privacy plan (status_facts() in status_page.h).
  void start(Json facts, PeerEpsilons peer_epsilons);

  // Rank 0's training thread at each step: a store, never a wait.
  void on_step(long long step);
  void add_epoch(const Json& line);
  void add_consensus(const Json& line);
  // The run's end: its summary line ("summary" or "stopped"), or why it failed.
  void finish(const Json& summary);
  void fail(const std::string& why);
  // A peer's figures, from the status feed's thread (rank 0's own included).
  void peer_figures(int rank, PeerFigures figures);
  // Every peer's figures as status()["live"] shows them (null before any came).
  Json live() const;
  // For a report made from a metrics file (apps/run_report.h): the live figures as a run's
  // "peers" line wrote them, shown when no feed filled the board.
  void restore_live(Json live);

  Json status() const;                 // the /api/status document
  std::string prometheus() const;      // the /metrics text (Prometheus's format 0.0.4)

  // Kept in memory: the last this many consensus lines (a run of a million steps with
  // --metrics-every 1 must not grow the page's memory without bound).
  static constexpr std::size_t kConsensusKept = 2000;
  // Each peer's epsilon is the accountant's for a new step (tens of ms with PLD, on the server's
  // thread, beside training): recomputed at most this often, however often clients ask.
  static constexpr std::chrono::seconds kPeerEpsilonsEvery{5};
  // A peer whose status feed has said nothing for this long (it sends every second) is silent.
  static constexpr std::chrono::seconds kSilentAfter{5};

 private:
  using Clock = std::chrono::steady_clock;
  // Cached under cache_mutex_ alone, so that the accountant's work never holds mutex_, which
  // rank 0's training thread takes to add its lines.
  Json peer_epsilons_at(long long step, const Json& summary, const PeerEpsilons& compute) const;
  Json live_peers(Clock::time_point now) const;  // under mutex_

  // A peer's last figures and the ones before (rates are their difference), and when the last
  // came: one entry per rank, sized by the first figures.
  struct Heard {
    PeerFigures last, before;
    bool heard = false, twice = false;
    Clock::time_point at;
  };

  const Clock::time_point start_ = Clock::now();
  std::atomic<long long> step_{0};
  std::atomic<long long> last_step_ns_{-1};  // since start_, of the last on_step

  mutable std::mutex mutex_;
  Json facts_;  // null until start()
  PeerEpsilons peer_epsilons_;
  std::vector<Json> epochs_;
  std::vector<Json> consensus_;
  long long consensus_dropped_ = 0;
  Json summary_;           // null until the end
  std::string failure_;    // empty unless the run failed
  std::vector<Heard> heard_;
  Json restored_live_;     // restore_live()'s
  mutable std::mutex cache_mutex_;
  mutable long long cached_step_ = -1;  // the step cached_epsilons_ are for
  mutable Clock::time_point cached_at_;
  mutable Json cached_epsilons_;
};

}  // namespace dpg::app
