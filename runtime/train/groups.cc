#include "runtime/train/groups.h"

#include <algorithm>
#include <string>

#include "runtime/core/error.h"

namespace dpg::train {

GroupGenerator::GroupGenerator(int world, int group_size, Clock::duration first_patience,
                               std::uint64_t first_id)
    : world_(world),
      group_size_(static_cast<std::size_t>(group_size)),
      first_patience_(first_patience),
      formed_(static_cast<std::size_t>(std::max(world, 0))),
      left_(static_cast<std::size_t>(std::max(world, 0))),
      period_s_(static_cast<std::size_t>(std::max(world, 0)), 0.0),
      next_id_(first_id),
      first_id_(first_id) {
  if (world < 2 || group_size < 2 || group_size > world) {
    fail(Code::invalid_argument, "group_size: " + std::to_string(group_size) +
                                     ", but the run has " + std::to_string(world) +
                                     " peers (need 2 to " + std::to_string(std::max(world, 2)) +
                                     ")");
  }
}

Group GroupGenerator::join(int peer, const std::function<void()>& check) {
  if (peer < 0 || peer >= world_) {
    fail(Code::internal, "group generator: peer " + std::to_string(peer) + " of " +
                             std::to_string(world_));
  }
  const auto p = static_cast<std::size_t>(peer);
  std::unique_lock lock(mu_);
  const auto now = Clock::now();
  if (left_[p]) {
    // An exponentially smoothed period: a peer's compute per step, its waits left out.
    const double s = std::chrono::duration<double>(now - *left_[p]).count();
    period_s_[p] = period_s_[p] == 0.0 ? s : 0.75 * period_s_[p] + 0.25 * s;
  }
  queue_.push_back({peer, now});
  cv_.notify_all();
  while (!formed_[p]) {
    try {
      lock.unlock();
      check();
      lock.lock();
    } catch (...) {
      lock.lock();
      std::erase_if(queue_, [&](const Waiting& w) { return w.peer == peer; });
      throw;
    }
    if (formed_[p]) break;
    const auto t = Clock::now();
    if (queue_.size() >= group_size_) {
      form(group_size_);
    } else if (!queue_.empty() && t >= queue_.front().since + patience_locked()) {
      form(queue_.size());
    } else {
      const auto until = queue_.empty() ? t + std::chrono::milliseconds(50)
                                        : queue_.front().since + patience_locked();
      cv_.wait_until(lock, std::min(until, t + std::chrono::milliseconds(50)));
    }
  }
  Group g = std::move(*formed_[p]);
  formed_[p].reset();
  left_[p] = Clock::now();
  return g;
}

void GroupGenerator::form(std::size_t n) {
  Group g;
  g.id = next_id_++;
  for (std::size_t i = 0; i < n; ++i) {
    g.members.push_back(queue_.front().peer);
    queue_.pop_front();
  }
  std::sort(g.members.begin(), g.members.end());
  for (int m : g.members) formed_[static_cast<std::size_t>(m)] = g;
  cv_.notify_all();
}

GroupGenerator::Clock::duration GroupGenerator::patience_locked() const {
  std::vector<double> known;
  for (double s : period_s_) {
    if (s > 0) known.push_back(s);
  }
  if (known.empty()) return first_patience_;
  // The lower median: with two peers, the faster one's period.
  const std::size_t mid = (known.size() - 1) / 2;
  std::nth_element(known.begin(), known.begin() + static_cast<std::ptrdiff_t>(mid), known.end());
  const double twice = 2.0 * known[mid];
  const double s = std::clamp(twice, 1e-3, 2.0);
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

GroupGenerator::Clock::duration GroupGenerator::patience() const {
  std::lock_guard lock(mu_);
  return patience_locked();
}

std::uint64_t GroupGenerator::groups_formed() const {
  std::lock_guard lock(mu_);
  return next_id_ - first_id_;
}

}  // namespace dpg::train
