// Gradient bucketing for the all-reduce: the released pieces of a step's gradient (from the end of
// the vector down, as private_gradient hands them out) are gathered into buckets of about
// bucket_bytes, and
// each bucket's all-reduce runs on a communication thread while the compute thread sums and
// noises the next layers. wait() returns when every bucket of the step is summed over the peers:
// the mechanism's buffer then holds what one all-reduce of the whole gradient would give, up to
// the order in which floats were added.
//
// The thread has a Communicator of its own over the same transport, in tag space 1, so its tags
// never meet the training thread's (space 0). The transport must take posts and waits from two
// threads and move data while neither waits: InprocTransport does (a fabric mutex, and waiters
// sleep on their own slots), TcpTransport only with TcpOptions::progress_thread (without it the
// waiting thread runs the I/O, and two waiting threads would both run it), which AlgoInfo's
// overlaps() asks for. Every peer forms the same buckets (from the layer sizes alone) and reduces
// them in the same order, as the collectives require.
//
// Between the first add() of a step and its wait() the training thread must run no collective of
// its own: messages from one peer are taken in the order sent (a message whose receive is not
// posted holds back the later ones), so the two threads' messages would wait on each other.
// The trainer only computes there; every bucket message a peer sends precedes its next own one.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "dp/mechanism.h"
#include "runtime/collective/communicator.h"
#include "runtime/core/trace.h"

namespace dpg::train {

class BucketReducer {
 public:
  // `main` is the training thread's communicator (its transport and options are shared).
  // `tracer` (optional): the thread's track is "comm", and wait() records the training thread's
  // blocked time as a wait span.
  BucketReducer(collective::Communicator& main, dp::GaussianMechanism& mechanism,
                std::size_t bucket_bytes, trace::Tracer* tracer = nullptr);
  ~BucketReducer();
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  // A released part of step t's gradient; starts the all-reduce of every bucket it completes.
  // The part at offset 0 (handed out last) closes the step's last bucket.
  void add(long long t, const dp::PrivateGradient& part, std::size_t offset);
  // Starts what is gathered, then blocks until every bucket of the step is reduced; rethrows the
  // communication thread's failure.
  void wait();

  std::size_t values() const { return bucket_values_; }  // a bucket's
  // Buckets reduced so far (for tests and the log).
  long long buckets() const;

 private:
  void flush();
  void submit(const dp::PrivateGradient& bucket);
  void run();

  collective::Communicator comm_;  // the communication thread's, in tag space 1
  dp::GaussianMechanism& mechanism_;
  std::size_t bucket_values_;
  long long step_ = -1;
  std::optional<dp::PrivateGradient> pending_;  // gathered, not yet started (contiguous)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<dp::PrivateGradient> queue_;  // started, not yet taken by the thread
  long long submitted_ = 0, done_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  trace::Tracer* tracer_;
  std::thread thread_;
};

}  // namespace dpg::train
