#include "runtime/train/run_setup.h"

#include <cmath>
#include <exception>
#include <limits>
#include <optional>
#include <string>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/core/range.h"
#include "runtime/model/blas_threads.h"
#include "runtime/train/run_state.h"

namespace dpg::train {
namespace {

[[noreturn]] void refuse(const std::string& message) { fail(Code::invalid_argument, message); }

// The most buckets a step's gradient may be cut into (check_buckets).
constexpr int kMaxBuckets = 1024;

// "allreduce", "gossip or local-sgd": the algorithms whose line has `allowed`.
std::string algos_with(bool AlgoInfo::*allowed) {
  std::vector<std::string> names;
  for (int a = 0; a < static_cast<int>(std::size(EnumNames<Algo>::names)); ++a) {
    const Algo algo = static_cast<Algo>(a);
    if (algo_info(algo).*allowed) names.push_back(to_string(algo));
  }
  return or_list(names);
}

// Each bucket is an all-reduce of its own every step: past kMaxBuckets of them a step is mostly
// their latencies (a bucket of one byte made 203,530 all-reduces a step of the default model and
// crawled). Refused before the first step, naming the flag and the smallest size allowed.
void check_buckets(const RunInputs& in) {
  const TrainConfig& c = in.config;
  if (c.bucket_bytes <= 0) return;
  const double params = spec_for(c, in.data.train).param_count();
  const double bucket_values = std::max(1.0, std::floor(static_cast<double>(c.bucket_bytes) / 4));
  const double buckets = std::ceil(params / bucket_values);
  if (buckets > static_cast<double>(kMaxBuckets)) {
    const double least = std::ceil(params / kMaxBuckets) * 4;
    refuse("/bucket_bytes: buckets of " + std::to_string(c.bucket_bytes) + " bytes cut the " +
           std::to_string(static_cast<long long>(params) * 4) + "-byte gradient into " +
           std::to_string(static_cast<long long>(buckets)) + " all-reduces a step; at most " +
           std::to_string(kMaxBuckets) + " (give at least " +
           std::to_string(static_cast<long long>(least)) + " bytes, or 0 for one)");
  }
}

// What the algorithm's line allows.
void check_algorithm(const RunInputs& in, const AlgoInfo& a) {
  const TrainConfig& c = in.config;
  if (c.init == Init::independent && !a.independent_init) {
    // The other algorithms keep one model (or average to one): peers starting apart would
    // evaluate and report a mixture of different models.
    refuse("/init: independent needs an algorithm that mixes the peers' models (" +
           algos_with(&AlgoInfo::independent_init) + "), not " + to_string(c.algo));
  }
  if (c.secure_aggregation && !a.secure_aggregation) {
    refuse("/secure_aggregation: only with algo " + algos_with(&AlgoInfo::secure_aggregation) +
           " (the masks cancel in a sum over every peer), not " + to_string(c.algo));
  }
  if (c.transport == TransportMode::nccl && !a.nccl) {
    refuse("/transport: nccl carries the messages of " + algos_with(&AlgoInfo::nccl) +
           " only, not " + to_string(c.algo) + "'s (use auto, tcp or shm)");
  }
  if (in.hooks.sum && a.streams(c)) {
    refuse("/algo: " + to_string(c.algo) + " hands its gradient over in parts under this "
           "configuration; the audit's canaries need the whole clipped sum");
  }
}

// What the settings allow together, and the backends apps/ handed in.
void check_settings(const RunInputs& in) {
  const TrainConfig& c = in.config;
  const bool cuda = parse_device(c.device).cuda;
  if (c.secure_aggregation) {
    if (!c.dp) refuse("/secure_aggregation: needs dp (it aggregates noised gradients)");
    if (c.noise_mode != NoiseMode::distributed) {
      refuse("/secure_aggregation: needs noise_mode distributed (the sum carries the noise; "
             "masked messages need no noise of their own)");
    }
    if (c.bucket_bytes > 0) refuse("/secure_aggregation: not with bucket_bytes (one masked sum per step)");
    if (c.hierarchical) refuse("/secure_aggregation: not with hierarchical (the masks cancel only in the flat sum)");
  }
  if (c.transport == TransportMode::nccl) {
    if (!cuda) {
      refuse("/transport: nccl reduces on the GPU of device cuda or cuda:N, not on device " +
             c.device);
    }
    if (c.bucket_bytes > 0 || c.hierarchical) {
      refuse(std::string("/transport: nccl reduces the whole gradient at once; not with ") +
             (c.bucket_bytes > 0 ? "bucket_bytes" : "hierarchical"));
    }
    if (in.comm != nullptr && !in.backends.direct) {
      fail(Code::failed_precondition, "/transport: nccl, but no collectives on device memory "
                                      "were handed to the run");
    }
  }
  if (cuda && (c.secure_noise || c.secure_aggregation)) {
    refuse(std::string("/device: ") + c.device + " draws Philox noise on the GPU; " +
           (c.secure_noise ? "secure_noise" : "secure_aggregation") +
           " draws its noise on the CPU (use device cpu)");
  }
  if (cuda && in.hooks.sum) {
    fail(Code::failed_precondition,
         "/device: the audit's canaries join the clipped sum on the CPU; use device cpu");
  }
  if (cuda && !in.backends.device) {
    fail(Code::failed_precondition, "/device: " + c.device + ", but no GPU backend was handed "
                                    "to the run");
  }
}

int rank_of(const RunInputs& in) { return in.comm ? in.comm->rank() : 0; }
int world_of(const RunInputs& in) { return in.comm ? in.comm->world() : 1; }

// The noise multiplier's search (a dozen accountant evaluations, seconds with PLD at small
// rates) runs once, on rank 0, not on every peer at once. Each other peer takes rank 0's
// multiplier only after checking that it meets the target by its own evaluation, the property
// calibration guarantees: a peer's privacy never rests on another peer's word.
dp::PrivacyPlan agreed_plan(const dp::PlanInputs& in, collective::Communicator* comm) {
  if (comm == nullptr || comm->world() == 1 || !in.dp || in.noise_multiplier > 0 ||
      in.secure_aggregation) {
    return dp::plan_privacy(in);
  }
  double sigma = std::numeric_limits<double>::quiet_NaN();  // NaN: rank 0's plan failed
  std::optional<dp::PrivacyPlan> mine;
  std::exception_ptr error;
  if (comm->rank() == 0) {
    try {
      mine = dp::plan_privacy(in);
      sigma = mine->sigma;
    } catch (...) {
      error = std::current_exception();
    }
  }
  try {
    comm->broadcast(public_value(std::as_writable_bytes(std::span<double>(&sigma, 1))), 0);
  } catch (const Error& e) {
    fail(e.code(), std::string("waiting for rank 0's calibrated noise multiplier: ") + e.what());
  }
  if (comm->rank() == 0) {
    if (error) std::rethrow_exception(error);
    return *mine;
  }
  if (std::isnan(sigma)) return dp::plan_privacy(in);  // rank 0 failed: the same error here
  return dp::plan_with_multiplier_from(in, sigma,
                                       rank_prefix(comm->rank()) + "rank 0");
}

// With device cuda: the model on the GPU and the training rows there, and with transport nccl
// the collectives on its memory (collective: every peer sets up NCCL here).
void place_on_device(RunState& s, const RunInputs& in) {
  const TrainConfig& c = in.config;
  if (!parse_device(c.device).cuda) return;
  s.device = in.backends.device(s.spec, s.model.params(), rank_of(in));
  s.device->upload_rows(in.data.train.features, in.data.train.labels);
  DPG_INFO("train: computes on " << s.device->device_name());
  if (in.comm == nullptr || c.transport != TransportMode::nccl) return;
  s.direct = in.backends.direct(*in.comm);
  if (auto route = s.direct->host_route()) {
    in.comm->route_float_allreduce(std::move(route));
    s.float_route.comm = in.comm;
  }
  DPG_INFO("train: " << to_string(c.algo) << "'s messages and the float all-reduces through NCCL");
}

}  // namespace

const data::Dataset& eval_split(const RunInputs& in) {
  return in.config.eval_split == EvalSplit::validation ? in.data.validation : in.data.test;
}

void check_run(const RunInputs& in) {
  validate(in.config);
  check_algorithm(in, algo_info(in.config.algo));
  check_buckets(in);
  check_settings(in);
  const TrainConfig& c = in.config;
  if (c.dp && c.secure_noise && !c.secure_aggregation && world_of(in) > 1 &&
      algo_info(c.algo).release == dp::Release::summed &&
      c.noise_mode == NoiseMode::distributed && c.target != PrivacyTarget::messages) {
    // Secure noise's argument is for one discrete Gaussian on the grid (dp/discrete_gaussian.h);
    // distributed noise would make the model's noise a sum of the peers' shares.
    refuse("/secure_noise: with " + to_string(c.algo) + "'s distributed noise each of the " +
           std::to_string(world_of(in)) + " peers adds a share of discrete Gaussian noise, and a "
           "sum of discrete Gaussians is not the discrete Gaussian secure noise is argued for; "
           "give noise_mode local (each peer adds the whole noise), secure_aggregation (Skellam "
           "shares, whose sum is exactly Skellam), or an algorithm whose peers noise their own "
           "updates (gossip, ps-async, local-sgd, ad-psgd, partial-allreduce)");
  }
  if (world_of(in) == 1 && in.config.servers != 1) {
    refuse("/servers: " + std::to_string(in.config.servers) + " server ranks, but this run has "
           "one peer, which trains alone with no server (leave it out, or give a hosts file)");
  }
  if (in.data.train.rows == 0) {
    refuse("train: rank " + std::to_string(rank_of(in)) + "'s training shard is empty");
  }
  if (c.batch_memory_mib > 0 && physical_rows(c, spec_for(c, in.data.train)) == 0) {
    refuse("/batch_memory_mib: " + number_text(c.batch_memory_mib) + " MiB holds no row of this "
           "model's pass (one row takes " +
           std::to_string(std::llround(pass_row_bytes(spec_for(c, in.data.train)))) +
           " bytes); give more, or 0 for no cap");
  }
  if (in.config.eval_split == EvalSplit::validation && in.data.validation.rows == 0) {
    refuse("/eval_split: the data folder " + in.config.data +
           " holds no validation rows (prepare it with --validation N)");
  }
}

dp::PrivacyPlan plan_run(const RunInputs& in) {
  const TrainConfig& c = in.config;
  // Every peer's shard size (public: the manifest has them), for the sampling rates.
  std::vector<double> rows(static_cast<std::size_t>(world_of(in)), 0.0);
  rows[static_cast<std::size_t>(rank_of(in))] = static_cast<double>(in.data.train.rows);
  if (in.comm) in.comm->allreduce(public_value(std::span<double>(rows)), collective::Reduce::sum);
  double total_rows = 0;
  for (double r : rows) total_rows += r;
  if (c.batch_size > total_rows) {
    refuse("batch_size: " + std::to_string(c.batch_size) + " exceeds the " +
           std::to_string(total_rows) + " training examples");
  }
  dp::PlanInputs p;
  p.dp = c.dp;
  p.release = world_of(in) > 1 ? algo_info(c.algo).release : dp::Release::summed;
  p.distributed_noise = c.noise_mode == NoiseMode::distributed;
  p.target_messages = c.target == PrivacyTarget::messages;
  p.shard_rows = rows;
  p.batch_size = c.batch_size;
  p.peer_share = in.peer_share;
  p.rate_cap = in.rate_cap;
  p.epochs = c.epochs;
  p.noise_multiplier = c.noise_multiplier;
  p.target_epsilon = c.target_epsilon;
  p.delta = c.delta;
  p.accountant = c.accountant == PrivacyAccountant::pld ? dp::AccountantKind::pld
                                                       : dp::AccountantKind::rdp;
  p.secure_aggregation = c.secure_aggregation;
  if (p.secure_aggregation) {
    // d, for the rounding's share of the grid's sensitivity: sum over layers of (in + 1) * out;
    // the widest layer, for the clipping's float allowance.
    const model::MlpSpec spec = spec_for(c, in.data.train);
    p.num_params = spec.param_count();
    const std::vector<int> widths = spec.widths();
    p.widest_layer = *std::max_element(widths.begin(), widths.end());
  }
  try {
    return agreed_plan(p, in.comm);
  } catch (const Error& e) {
    fail(e.code(), std::string("train: ") + e.what());
  }
}

std::unique_ptr<RunState> build_state(const RunInputs& in, const dp::PrivacyPlan& plan) {
  const TrainConfig& c = in.config;
  model::set_blas_threads(c.threads);
  auto state = std::make_unique<RunState>(c, in.data.train, plan, rank_of(in));
  RunState& s = *state;
  // The GPU first, before this run's first collective: a peer without one fails at once.
  place_on_device(s, in);
  s.evaluator.emplace(eval_split(in), in.comm, in.peer_share);
  if (in.comm && c.init == Init::same) {
    // Seeded initialisation already agrees; the broadcast makes it so whatever the build.
    in.comm->broadcast(public_model(std::span<float>(s.model.params())).bytes(), 0);
  }
  if (c.ema_decay > 0) s.ema.emplace(s.model.params(), c.ema_decay);
  s.scratch.resize(s.model.num_params());
  s.algorithm = make_algorithm({.config = c,
                                .comm = in.comm,
                                .plan = plan,
                                .mechanism = s.mechanism,
                                .num_params = s.model.num_params(),
                                .phases = in.phases,
                                .steps_per_epoch = 1.0 / plan.q,
                                .tracer = in.tracer,
                                .host_of = in.host_of,
                                .device = s.device.get(),
                                .direct = s.direct.get(),
                                .peer_share = in.peer_share});
  s.resident = s.device != nullptr && s.algorithm->updates_on_device();
  Straggler straggler(in.slowdown, rank_of(in), 1.0 / plan.q);
  if (straggler.active()) s.straggler.emplace(std::move(straggler));
  return state;
}

}  // namespace dpg::train
