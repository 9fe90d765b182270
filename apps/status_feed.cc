#include "apps/status_feed.h"

#include <cstring>
#include <exception>
#include <span>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/core/wire.h"
#include "runtime/net/ops.h"

namespace dpg::app {
namespace {

enum Field : std::size_t { kStep, kClock, kInFlight, kBlocked, kWaitingOn, kWaiting, kFinished, kWorld };

std::vector<int> others(int world) {
  std::vector<int> v;
  for (int r = 1; r < world; ++r) v.push_back(r);
  return v;
}

}  // namespace

std::vector<int64_t> StatusFeed::encode(const net::LinkCounters::Snapshot& s, long long step,
                                        int64_t clock_ns, bool finished) {
  const std::size_t world = s.sent.size();
  std::vector<int64_t> v(kFields + 2 * world, 0);
  v[kStep] = step;
  v[kClock] = clock_ns;
  v[kInFlight] = s.in_flight_ns;
  v[kBlocked] = s.blocked_ns;
  v[kWaitingOn] = s.waiting_on;
  v[kWaiting] = s.waiting_ns;
  v[kFinished] = finished ? 1 : 0;
  v[kWorld] = static_cast<int64_t>(world);
  for (std::size_t p = 0; p < world; ++p) {
    v[kFields + p] = static_cast<int64_t>(s.sent[p]);
    v[kFields + world + p] = static_cast<int64_t>(s.received[p]);
  }
  return v;
}

PeerFigures StatusFeed::decode(const int64_t* v, int world) {
  PeerFigures f;
  f.step = v[kStep];
  f.clock_s = static_cast<double>(v[kClock]) * 1e-9;
  f.in_flight_s = static_cast<double>(v[kInFlight]) * 1e-9;
  f.blocked_s = static_cast<double>(v[kBlocked]) * 1e-9;
  // A peer outside the run is no one to wait on (a notice is the sender's word only).
  f.waiting_on = v[kWaitingOn] >= 0 && v[kWaitingOn] < world ? static_cast<int>(v[kWaitingOn]) : -1;
  f.waiting_s = static_cast<double>(v[kWaiting]) * 1e-9;
  f.finished = v[kFinished] != 0;
  const auto n = static_cast<std::size_t>(world);
  for (std::size_t p = 0; p < n; ++p) {
    f.sent.push_back(static_cast<double>(v[kFields + p]));
    f.received.push_back(static_cast<double>(v[kFields + n + p]));
  }
  return f;
}

StatusFeed::StatusFeed(net::Transport& t, const net::LinkCounters& counters, StatusBoard* board,
                       std::chrono::milliseconds every)
    : t_(t), counters_(counters), board_(board), every_(every) {
  const int world = t.world();
  if (counters.world() != world) {
    fail(Code::internal, "status feed: counters for " + std::to_string(counters.world()) +
                             " peers on a transport of " + std::to_string(world));
  }
  const std::size_t bytes = notice_bytes(world);
  service_.emplace(t, net::kOpStatus, "status feed",
                   std::vector<collective::ServiceOp>{{bytes, 0, true}}, nullptr,
                   /*background=*/true);
  if (t.rank() == 0) {
    service_->serve(others(world), 0,
                    [this, world, bytes](const collective::Service::Request& r,
                                         Wire<const std::byte> in, collective::Service::Reply&) {
                      std::vector<int64_t> v(bytes / sizeof(int64_t));
                      std::memcpy(v.data(), in.values().data(), bytes);
                      if (v[kWorld] != world) {
                        throw collective::Blame(r.peer, Code::data_loss,
                                                "status feed: peer " + std::to_string(r.peer) +
                                                    " counts " + std::to_string(v[kWorld]) +
                                                    " peers, not " + std::to_string(world));
                      }
                      board_->peer_figures(r.peer, decode(v.data(), world));
                    });
  }
  thread_ = std::thread([this] { loop(); });
}

StatusFeed::~StatusFeed() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (!finished_) {
    // The run failed: no peer's feed will say goodbye, so no wait of it may run to its timeout.
    t_.poison(Code::aborted, rank_prefix(t_.rank()) + "the run ended");
  }
  if (thread_.joinable()) thread_.join();
}

void StatusFeed::publish(bool finished) {
  const auto clock = std::chrono::steady_clock::now() - start_;
  const std::vector<int64_t> v =
      encode(counters_.snapshot(), step_.load(std::memory_order_relaxed),
             std::chrono::duration_cast<std::chrono::nanoseconds>(clock).count(), finished);
  if (t_.rank() == 0) {
    if (board_ != nullptr) board_->peer_figures(0, decode(v.data(), t_.world()));
    return;
  }
  // Byte counts and timings: public (the header says why).
  const auto bytes = std::as_bytes(std::span<const int64_t>(v));
  service_->wait(service_->call(0, 0, static_cast<uint64_t>(step_.load()), public_value(bytes), {}));
}

void StatusFeed::loop() {
  const log::RankScope scope(t_.rank());
  const net::OffStepThread off_step;
  const net::BackgroundWaits background;  // its waits are not this peer waiting on the network
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    try {
      publish(false);
    } catch (const std::exception& e) {
      // The run's own waits report a failed link; the page shows the peer as silent.
      DPG_DEBUG("status feed: " << e.what());
      lock.lock();
      failed_ = true;
      return;
    }
    lock.lock();
    cv_.wait_for(lock, every_, [this] { return stop_; });
  }
}

void StatusFeed::finish() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  finished_ = true;
  // The last hook came before the last step, which the run then took.
  if (stepped_.load()) step_.fetch_add(1);
  try {
    if (failed_) return;
    publish(true);
    if (t_.rank() == 0) {
      service_->join();
    } else {
      service_->finish({0});
    }
  } catch (const std::exception& e) {
    DPG_WARN("status feed: " << e.what() << " (the page's figures stop there)");
  }
}

}  // namespace dpg::app
