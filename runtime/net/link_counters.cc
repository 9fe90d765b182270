#include "runtime/net/link_counters.h"

namespace dpg::net {
namespace {
thread_local bool t_off_step = false;
}  // namespace

OffStepThread::OffStepThread() : was_(t_off_step) { t_off_step = true; }
OffStepThread::~OffStepThread() { t_off_step = was_; }
bool OffStepThread::here() { return t_off_step; }

LinkCounters::LinkCounters(int world)
    : training_(std::this_thread::get_id()),
      sent_(static_cast<std::size_t>(world)),
      received_(static_cast<std::size_t>(world)) {}

int64_t LinkCounters::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

void LinkCounters::posted() {
  const std::lock_guard<std::mutex> lock(flight_mu_);
  if (in_flight_++ == 0) flight_since_ = now_ns();
}

void LinkCounters::done() {
  const std::lock_guard<std::mutex> lock(flight_mu_);
  if (in_flight_ > 0 && --in_flight_ == 0) flight_total_ += now_ns() - flight_since_;
}

void LinkCounters::carried(int peer, bool is_send, uint64_t bytes) {
  if (peer < 0 || peer >= world()) return;
  auto& counter = is_send ? sent_[static_cast<std::size_t>(peer)]
                          : received_[static_cast<std::size_t>(peer)];
  counter.fetch_add(bytes, std::memory_order_relaxed);
}

void LinkCounters::wait_begin(int peer) {
  waiting_since_.store(now_ns(), std::memory_order_relaxed);
  waiting_on_.store(peer, std::memory_order_release);
}

void LinkCounters::wait_end() {
  waiting_on_.store(-1, std::memory_order_release);
  blocked_ns_.fetch_add(now_ns() - waiting_since_.load(std::memory_order_relaxed),
                        std::memory_order_relaxed);
}

LinkCounters::Snapshot LinkCounters::snapshot() const {
  Snapshot s;
  const int64_t now = now_ns();
  s.sent.reserve(sent_.size());
  s.received.reserve(received_.size());
  for (const auto& v : sent_) s.sent.push_back(v.load(std::memory_order_relaxed));
  for (const auto& v : received_) s.received.push_back(v.load(std::memory_order_relaxed));
  {
    const std::lock_guard<std::mutex> lock(flight_mu_);
    s.in_flight_ns = flight_total_ + (in_flight_ > 0 ? now - flight_since_ : 0);
  }
  s.blocked_ns = blocked_ns_.load(std::memory_order_relaxed);
  s.waiting_on = waiting_on_.load(std::memory_order_acquire);
  if (s.waiting_on >= 0) {
    const int64_t d = now - waiting_since_.load(std::memory_order_relaxed);
    s.waiting_ns = d > 0 ? d : 0;
    s.blocked_ns += s.waiting_ns;  // the wait under way counts too
  }
  return s;
}

}  // namespace dpg::net
