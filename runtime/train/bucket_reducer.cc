#include "runtime/train/bucket_reducer.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "runtime/core/error.h"

namespace dpg::train {
namespace {

collective::Options in_space_one(collective::Options o) {
  o.tag_space = 1;
  return o;
}

}  // namespace

BucketReducer::BucketReducer(collective::Communicator& main, dp::GaussianMechanism& mechanism,
                             std::size_t bucket_bytes, trace::Tracer* tracer)
    : comm_(main.transport(), in_space_one(main.options())),
      mechanism_(mechanism),
      bucket_values_(std::max<std::size_t>(1, bucket_bytes / sizeof(float))),
      tracer_(tracer) {
  thread_ = std::thread([this] { run(); });
}

BucketReducer::~BucketReducer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();  // a bucket in flight ends within the transport's timeout
}

void BucketReducer::add(long long t, const dp::PrivateGradient& part, std::size_t offset) {
  if (t != step_) {
    // A new step: whatever an earlier step left gathered was started by its wait().
    step_ = t;
    pending_.reset();
  }
  if (pending_ && part.values().data() + part.values().size() != pending_->values().data()) {
    flush();  // not just below what is gathered: start that on its own
  }
  pending_ = pending_ ? dp::PrivateGradient::join(part, *pending_) : part;
  // Cut full buckets from the top; the rest waits for the next (lower) layer.
  while (pending_ && pending_->values().size() >= bucket_values_) {
    const std::size_t rest = pending_->values().size() - bucket_values_;
    submit(pending_->part(rest, bucket_values_));
    if (rest == 0) {
      pending_.reset();
    } else {
      pending_ = pending_->part(0, rest);
    }
  }
  if (offset == 0) flush();
}

void BucketReducer::flush() {
  if (!pending_) return;
  submit(*pending_);
  pending_.reset();
}

void BucketReducer::submit(const dp::PrivateGradient& bucket) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(bucket);
    ++submitted_;
  }
  cv_.notify_all();
}

void BucketReducer::wait() {
  flush();
  // Each bucket's waits have the transport's deadline (twice it when a peer is alive but itself
  // waiting); a bucket that takes longer than that means the thread is stuck.
  const auto patience = 2 * comm_.transport().timeout() + std::chrono::seconds(1);
  trace::Span blocked(tracer_, "wait", "wait");
  std::unique_lock lock(mu_);
  long long seen = done_;
  while (done_ < submitted_ && !error_) {
    if (!cv_.wait_for(lock, patience, [&] { return done_ != seen || error_; })) {
      fail(Code::deadline_exceeded,
           rank_prefix(comm_.rank()) + "bucketed all-reduce of step " +
               std::to_string(step_) + " (bucket " + std::to_string(done_ + 1) + " of " +
               std::to_string(submitted_) + " in all) made no progress for " +
               std::to_string(std::chrono::duration<double>(patience).count()) + " s");
    }
    seen = done_;
  }
  if (error_) std::rethrow_exception(error_);
}

long long BucketReducer::buckets() const {
  std::lock_guard lock(mu_);
  return done_;
}

void BucketReducer::run() {
  if (tracer_) tracer_->name_thread("comm");
  for (;;) {
    std::optional<dp::PrivateGradient> bucket;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      bucket = queue_.front();
      queue_.pop_front();
    }
    // After a failure the transport is poisoned: the later buckets are only counted.
    bool failed;
    {
      std::lock_guard lock(mu_);
      failed = error_ != nullptr || stop_;
    }
    if (!failed) {
      try {
        // The values are released already: summing them over the peers is post-processing.
        mechanism_.exchange(*bucket, [&](Wire<float> v) { comm_.allreduce(v); });
      } catch (...) {
        std::lock_guard lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
    }
    {
      std::lock_guard lock(mu_);
      ++done_;
    }
    cv_.notify_all();
  }
}

}  // namespace dpg::train
