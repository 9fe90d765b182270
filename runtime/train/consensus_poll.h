// The K-step consensus reports of an asynchronous algorithm (ad-psgd, the partial all-reduce),
// made without a meeting of the peers. The collective report (Trainer::consensus) has every peer
// join a barrier and all-reduces every metrics_every steps, so at each one the fastest peer waits
// for the slowest: an asynchronous algorithm whose peers meet every few steps is not
// asynchronous. Here rank 0 asks each peer for its model, every metrics_every of its own steps,
// through a message service; a peer's training thread hands its model over at its next step
// boundary (a copy, never a wait), and a thread of rank 0 computes the models' spread and
// evaluates them while rank 0 trains. The finished report goes back to rank 0's training thread,
// which passes it on at a later boundary. A round that comes while the last report is still being
// made is skipped (counted and logged), so the reports never queue up behind a slow peer.
//
// What rank 0 learns: every peer's model at a step of that peer's, and that step. Under these
// algorithms' release (each peer noises its own gradient, Release::own) a model is public: the
// peer's released updates and its mixes with other public models (docs/PRIVACY.md).
//
// Messages: a collective::Service under kOpReport (runtime/net/ops.h), rank 0 its only client and
// every other peer a server; a request is empty, its reply the peer's step (int64) and model.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "runtime/collective/service.h"
#include "runtime/core/trace.h"
#include "runtime/data/dataset.h"
#include "runtime/model/mlp.h"
#include "runtime/train/report.h"

namespace dpg::train {

// The spread of N models given one at a time: their mean and (1/N) sum_i ||x_i - mean||^2, the
// consensus distance of Trainer::consensus, by Welford's update in double.
class Spread {
 public:
  explicit Spread(std::size_t values) : mean_(values, 0.0) {}
  void add(std::span<const float> x);
  std::size_t count() const { return count_; }
  // The mean of the models added into `out`.
  void mean(std::span<float> out) const;
  double distance() const;

 private:
  std::vector<double> mean_;
  double squares_ = 0;  // sum over the values of the squared deviations from their mean
  std::size_t count_ = 0;
};

class ConsensusPoll {
 public:
  // Fills a span of the model's size with this peer's model as it stands (the algorithm's
  // Algorithm::current_model); called on the training thread.
  using Fill = std::function<void(std::span<float>)>;

  // Every peer constructs it at the same point (rank 0 starts its thread, the others serve).
  // `eval` (rank 0's evaluation split) must outlive the poll; its first `eval_rows` rows score the
  // mean and each peer's model (0: no evaluation).
  ConsensusPoll(net::Transport& t, const model::MlpSpec& spec, long long every,
                const data::Dataset& eval, std::size_t eval_rows, trace::Tracer* tracer);
  // Stops the thread and the service without throwing (an error path; close() is the normal
  // end). The transport should be poisoned first, so that nothing waits out its timeout.
  ~ConsensusPoll();
  ConsensusPoll(const ConsensusPoll&) = delete;
  ConsensusPoll& operator=(const ConsensusPoll&) = delete;

  // The training thread at the boundary after `step` steps. On rank 0: a report finished since
  // the last boundary (rethrowing the thread's failure), and at a multiple of `every` the start
  // of the next, whose fields the training thread knows (`head`: the epsilon spent, the
  // algorithm's annotations) unless the last is still being made. On the others: the model, when
  // rank 0 is waiting for it.
  std::optional<ConsensusReport> boundary(long long step, const Fill& fill,
                                          const std::function<ConsensusReport()>& head);
  // Before this peer may wait long away from its steps (an epoch's end, where the peers meet; the
  // algorithm's finish()): its model after `step` steps answers rank 0's requests until the next
  // boundary, so that a report is not held up by a peer waiting for a slower one.
  void park(long long step, const Fill& fill);
  // After the last step (and the algorithm's finish()): this peer's last model answers any
  // request from now on; rank 0 waits for the report in flight and returns it, then ends the
  // service. Every peer calls it.
  std::optional<ConsensusReport> close(long long step, const Fill& fill);

 private:
  void serve();
  void run();  // rank 0's thread
  ConsensusReport make(ConsensusReport head);
  void score(std::span<const float> x, double& accuracy, double& loss);

  net::Transport& t_;
  int rank_, world_;
  long long every_;
  std::size_t values_;
  const data::Dataset& eval_;
  std::size_t eval_rows_;
  trace::Tracer* tracer_;
  collective::Service service_;

  std::mutex mu_;
  std::condition_variable cv_;
  // A server's side: a request waits for the training thread's model.
  bool asked_ = false, ready_ = false, closed_ = false, parked_ = false, stopping_ = false;
  long long snap_step_ = 0;
  std::vector<float> snap_;  // this peer's model, for a reply (rank 0: for the next report)
  // Rank 0's side.
  std::optional<ConsensusReport> job_, done_;
  bool busy_ = false;
  std::exception_ptr error_;
  long long made_ = 0, skipped_ = 0;
  model::Mlp scorer_;  // rank 0's thread: the model it evaluates
  model::Workspace ws_;
  std::thread thread_;
};

}  // namespace dpg::train
