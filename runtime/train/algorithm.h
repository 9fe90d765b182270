// A distributed DP-SGD algorithm: what happens to a peer's privatised gradient and its model in a
// step. The trainer's step is the same for every algorithm and reads top to bottom:
//
//   algorithm.before_gradient(t, params)        gossip: the pre-step model starts for the neighbours
//   sample, forward, backward with per-example norms, clip and noise   -> mine (a PrivateGradient)
//     (with streams_gradient(), each released piece (a layer's bias, blocks of its weight rows)
//      also goes to on_gradient_part() as soon as it is ready, last layer first, so that sending
//      overlaps the rest of the gradient's summation)
//   algorithm.apply(t, mine, params, sgd)       exchange and update: sum then step, mix then step, ...
//   account (the privacy plan's accountant, once per step)
//
// and around the loop: release() at every evaluation (the model that is reported), finish() after
// the last step, and at the step boundaries where the peers agree to stop or checkpoint, save()
// and restore() (docs/RELIABILITY.md). An algorithm sees only privatised
// gradients (dp::PrivateGradient) and models updated from them, so nothing it sends can depend on
// an un-noised gradient.
//
// On a GPU (--device cuda), an algorithm that updates on the device has the same step with the
// model kept there: before_gradient_on_device(t), the device's released gradient (its gradient
// array holds nothing else: the device noises the clipped sum before anything reads it), then
// apply_on_device(t, ...) (below, "Device-resident training").
//
// Adding an algorithm: write a class deriving from Algorithm and its factory in a file of its own
// (algo_*.cc), give it a line in the table in algorithm.cc (its name, how its noise reaches the
// model, whether its transport must move data while the peer computes, what it allows, which
// peers it talks to, and its factory), and a value in the `Algo` enum and its names
// (runtime/core/train_config.h). Nothing in the trainer or the run's set-up changes: check_run
// reads what the line allows. Updating on the device is optional: without it, a GPU peer's host
// model goes to the device before each step.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dp/mechanism.h"
#include "dp/privacy_plan.h"
#include "dp/secagg.h"
#include "runtime/collective/communicator.h"
#include "runtime/collective/device_collectives.h"
#include "runtime/collective/hierarchical.h"
#include "runtime/core/json_io.h"
#include "runtime/core/trace.h"
#include "runtime/core/train_config.h"
#include "runtime/model/device_mlp.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/gossip.h"
#include "runtime/train/optimizer.h"

namespace dpg::train {

// What an algorithm is built from. References stay valid for the algorithm's life.
struct AlgoSetup {
  const TrainConfig& config;
  collective::Communicator* comm;           // null when the run has one peer
  const dp::PrivacyPlan& plan;
  dp::GaussianMechanism& mechanism;         // released this peer's gradient
  std::size_t num_params;
  const std::vector<GossipPhase>& phases;   // the graphs of the run (graph-based algorithms)
  double steps_per_epoch;                   // 1 / q
  // The run's timeline (null or off: none). Threads an algorithm starts name their tracks
  // ("server", "responder", "comm"), so that a trace tells the training thread's own waits
  // from a service thread's.
  trace::Tracer* tracer = nullptr;
  // host_of[r]: rank r's host (equal ids: one host), for the hierarchical all-reduce; empty when
  // unknown (every rank on a host of its own).
  const std::vector<int>& host_of;
  // With --device cuda: the peer's device model (null on the CPU), and with --transport nccl the
  // collectives on its memory (null: messages go over the transport, staged through the host).
  model::DeviceMlp* device = nullptr;
  collective::DeviceCollectives* direct = nullptr;
  // Each peer's share of the work from --balance speed (public speeds; RunInputs::peer_share), in
  // rank order; empty: even peers.
  std::span<const double> peer_share = {};
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;

  // Before the step's gradient is computed at `params` (which stay unchanged until apply()).
  virtual void before_gradient(long long /*t*/, std::span<const float> /*params*/) {}

  // Whether the gradient should be handed over piece by piece as it is released, and about how
  // many values a piece of a large layer should have (0: whole weight matrices).
  virtual bool streams_gradient() const { return false; }
  virtual std::size_t gradient_part_values() const { return 0; }
  // One released piece of step t's gradient: values [offset, offset + part.size()) of the whole.
  virtual void on_gradient_part(long long /*t*/, const dp::PrivateGradient& /*part*/,
                                std::size_t /*offset*/) {}

  // Exchanges this peer's released gradient (or model) and updates `params`.
  virtual void apply(long long t, const dp::PrivateGradient& mine, std::span<float> params,
                     Sgd& sgd) = 0;

  // --- Device-resident training (--device cuda). An algorithm whose updates_on_device() is true
  // keeps the parameters, the momentum and the gradient on the setup's device model: the trainer
  // calls before_gradient_on_device() and apply_on_device() in place of before_gradient() and
  // apply(), and brings the model to the host only to evaluate, report or checkpoint it (before
  // release(), finish(), save()). What goes on the wire leaves the device through its staging
  // buffers, or not at all with `direct` collectives. The other algorithms update the host model,
  // which goes to the device before each step.
  virtual bool updates_on_device() const { return false; }
  // Whether apply_on_device() needs the step's released gradient on the host (it goes on the
  // wire over the transport). The trainer then copies it over piece by piece, handing each piece
  // to on_gradient_part() as it lands when streams_gradient().
  virtual bool needs_host_gradient() const { return false; }
  // Before the step's gradient is computed at the device's parameters (unchanged until
  // apply_on_device()).
  virtual void before_gradient_on_device(long long /*t*/) {}
  // Exchanges and updates the device model with the step's released gradient (on the device;
  // `mine` is its host copy when needs_host_gradient(), else null) and the step's SGD settings.
  virtual void apply_on_device(long long t, const dp::PrivateGradient* mine,
                               const model::DeviceSgdOptions& sgd);

  // After the last step (a last synchronisation, stopping servers). Every peer calls it, also
  // when the run stops early at a step boundary (after that boundary's checkpoint).
  virtual void finish(std::span<float> /*params*/) {}

  // What the algorithm holds beyond the trainer's model, optimiser and generators (a server's
  // shard and optimiser, counters, its own generator), into meta["algo"] and sections named
  // "algo/...", at boundary t (steps 0..t-1 taken everywhere, step t not begun; every peer at the
  // same t). Everything the next steps depend on must be here: a run restored from it takes the
  // same steps as one that went on. An algorithm whose messages may still be in flight between
  // steps (ps-async's replies, ad-psgd's answers) first waits for them (its service's drain), so
  // that the state saved is that of the boundary.
  virtual void save(long long /*t*/, Checkpoint& /*out*/) {}
  // Reads save()'s state back into a new algorithm that has taken no step, before step t.
  // Errors (data_loss) name the checkpoint file and section.
  virtual void restore(long long /*t*/, const Checkpoint& /*in*/) {}

  // The model reported at an evaluation, from this peer's `mine` (its iterate or average) into
  // `out`; collective (every peer calls it at the same evaluation). Default: `mine` itself, for
  // algorithms whose replicas agree after every step.
  virtual void release(std::span<const float> mine, std::span<float> out);

  // This peer's model as it stands, from its `params` into `out`, for a consensus report that
  // asks it without a meeting (consensus_poll.h): on the training thread at a step boundary,
  // while other peers' requests may still be answered. Default: `params`.
  virtual void current_model(std::span<const float> params, std::span<float> out) const {
    std::copy(params.begin(), params.end(), out.begin());
  }

  // Whether the peers' models differ between synchronisations: then the epoch lines carry the
  // consensus distance and each peer's own model's accuracy, and the released model is their mean.
  virtual bool replicas_differ() const { return false; }

  // Algorithm-specific fields of the metrics lines (gossip: the graph in force and its rho) after
  // `t` steps; `summary` for the run's summary.
  virtual void annotate(Json& /*line*/, long long /*t*/, bool /*summary*/) const {}

 protected:
  // The mean over every peer of `mine`, into `out`.
  static void mean_over_peers(collective::Communicator& comm, std::span<const float> mine,
                              std::span<float> out);
};

// The hierarchy of a run with `hierarchical` set (host_of from the setup, else a host per rank),
// built collectively on every peer; nullopt without it.
std::optional<collective::Hierarchy> make_hierarchy(const AlgoSetup& s);

// Secure aggregation's masker (dp/secagg.h), collectively on every peer: a fresh X25519 key pair,
// every peer's public key by all-gather (over connections the cluster secret authenticates, where
// one is set), and one key per pair bound to both ranks and `context` (the run's settings hash).
dp::PairwiseMasker agree_masks(collective::Communicator& comm, std::uint64_t context);

// The table every algorithm has one line in (algorithm.cc).
struct AlgoInfo {
  Algo algo;                        // its value of `algo` in the config
  dp::Release release;              // how a peer's noise reaches the model (the privacy plan)
  // Whether, under config c, the transport must move messages while the peer computes (an I/O
  // thread) and take posts and waits from two threads at once: the algorithm overlaps
  // communication with computation (allreduce with bucket_bytes > 0), or answers other peers
  // asynchronously (gossip).
  bool (*overlaps)(const TrainConfig& c);
  // Whether, under config c, it takes its gradient piece by piece as it is released
  // (Algorithm::streams_gradient; the audit's canaries need the whole sum).
  bool (*streams)(const TrainConfig& c);
  // It runs on the graphs of `topology` and `topology_schedule` (AlgoSetup::phases).
  bool uses_graph;
  // The peers run steps apart and exchange messages whenever they come (ps-async, ad-psgd):
  // the order of the float operations depends on timing, so a repeated step is not the same
  // release, and the stop checks are spaced out (each is a meeting of every peer).
  bool asynchronous;
  // What it allows, checked once by check_run (run_setup.h): secure aggregation's masked sum
  // (the masks cancel only in a sum over every peer); peers that start from different models
  // (init independent: only an algorithm that mixes them reports one model); its messages
  // through --transport nccl's collectives on device memory.
  bool secure_aggregation;
  bool independent_init;
  bool nccl;
  // The peers this rank exchanges messages with, beyond the collectives' own.
  std::vector<int> (*peers)(const TrainConfig& c, int rank, int world,
                            const std::vector<GossipPhase>& phases);
  std::unique_ptr<Algorithm> (*make)(const AlgoSetup& setup);
};

// The line of `algo`; throws internal when an algorithm of the config has no line.
const AlgoInfo& algo_info(Algo algo);
// The algorithm a run uses: config.algo's, or `single` when the run has one peer.
std::unique_ptr<Algorithm> make_algorithm(const AlgoSetup& setup);
// Every peer `rank` exchanges models with in any phase (ascending, without rank).
std::vector<int> graph_neighbours(const std::vector<GossipPhase>& phases, int rank);

}  // namespace dpg::train
