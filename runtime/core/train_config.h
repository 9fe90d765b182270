// The training configuration: one JSON file becomes this validated struct; every field can be
// overridden on the command line. Defaults are the documented DP-SGD recipe (docs/RECIPE.md).
//
// Each field is declared twice only: as a member below (its type and default) and as one line of
// the table in train_config.cc (JSON key, flag, help, range, whether every peer must share it).
// Reading, writing, the handshake hash, validation, the flags of `dpgossip train` and describe()
// are all generated from that table.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/bounds.h"
#include "runtime/core/error.h"
#include "runtime/core/json_io.h"

namespace dpg {

// single: one process. allreduce: synchronous data-parallel DP-SGD over a ring all-reduce.
// gossip: D-PSGD over `topology` (docs/GOSSIP.md). ps-sync / ps-async: parameter servers on the
// ranks 0..servers-1. local-sgd: `local_steps` local steps between model averages. ad-psgd:
// asynchronous decentralized SGD. partial-allreduce: model averages within groups of the peers
// ready at the same time (Prague).
enum class Algo {
  single, allreduce, gossip, ps_sync, ps_async, local_sgd, ad_psgd, partial_allreduce
};
enum class Activation { relu, tanh };
enum class NoiseMode { distributed, local };
enum class Sampling { poisson, shuffle };
enum class TopologyWeights { metropolis, uniform, lazy };
enum class LrSchedule { constant, cosine };
enum class Init { same, independent };
// pld: privacy loss distributions (tight); rdp: Renyi DP as Opacus (looser). docs/PRIVACY.md.
enum class PrivacyAccountant { pld, rdp };
// How peers talk: auto, shared memory with the peers the hosts file puts on this peer's host and
// TCP with the rest; tcp or shm, one for every peer (shm refuses a peer on another host).
enum class TransportMode { automatic, tcp, shm, nccl };
// The split every epoch line and the summary evaluate: the test split, or the training rows that
// `prepare --validation N` held out (what a configuration is tuned on).
enum class EvalSplit { test, validation };
// Whose epsilon target_epsilon calibrates: the released model's, or (the stronger promise) every
// peer's messages' (docs/PRIVACY.md, "Who is protected from whom").
enum class PrivacyTarget { model, messages };
// off: every peer takes the same share of the batch. speed: shares proportional to each peer's
// measured speed on public work at the start (docs/HETEROGENEITY.md).
enum class Balance { off, speed };

// The strings of each enum, in declaration order: what JSON, the flags and to_string use.
template <class E> struct EnumNames;
template <> struct EnumNames<Algo> {
  static constexpr std::string_view names[] = {"single",   "allreduce", "gossip", "ps-sync",
                                               "ps-async", "local-sgd", "ad-psgd",
                                               "partial-allreduce"};
};
template <> struct EnumNames<Activation> {
  static constexpr std::string_view names[] = {"relu", "tanh"};
};
template <> struct EnumNames<NoiseMode> {
  static constexpr std::string_view names[] = {"distributed", "local"};
};
template <> struct EnumNames<Sampling> {
  static constexpr std::string_view names[] = {"poisson", "shuffle"};
};
template <> struct EnumNames<TopologyWeights> {
  static constexpr std::string_view names[] = {"metropolis", "uniform", "lazy"};
};
template <> struct EnumNames<LrSchedule> {
  static constexpr std::string_view names[] = {"constant", "cosine"};
};
template <> struct EnumNames<Init> {
  static constexpr std::string_view names[] = {"same", "independent"};
};
template <> struct EnumNames<PrivacyAccountant> {
  static constexpr std::string_view names[] = {"pld", "rdp"};
};
template <> struct EnumNames<TransportMode> {
  static constexpr std::string_view names[] = {"auto", "tcp", "shm", "nccl"};
};
template <> struct EnumNames<EvalSplit> {
  static constexpr std::string_view names[] = {"test", "validation"};
};
template <> struct EnumNames<PrivacyTarget> {
  static constexpr std::string_view names[] = {"model", "messages"};
};
template <> struct EnumNames<Balance> {
  static constexpr std::string_view names[] = {"off", "speed"};
};

std::string to_string(Algo a);
std::string to_string(Activation a);
std::string to_string(NoiseMode m);
std::string to_string(Sampling s);
std::string to_string(TopologyWeights w);
std::string to_string(LrSchedule s);
std::string to_string(Init i);
std::string to_string(PrivacyAccountant a);
std::string to_string(TransportMode m);
std::string to_string(EvalSplit s);
std::string to_string(PrivacyTarget t);
std::string to_string(Balance b);

// "a", "a or b", "a, b or c": the items of a list of choices, for messages.
template <class Items> std::string or_list(const Items& items) {
  std::string out;
  const std::size_t count = std::size(items);
  std::size_t i = 0;
  for (const auto& item : items) {
    out += (i == 0 ? "" : i + 1 == count ? " or " : ", ");
    out += item;
    ++i;
  }
  return out;
}

// "relu or tanh", "single, allreduce, ... or ad-psgd".
template <class E> std::string enum_choices() { return or_list(EnumNames<E>::names); }

// The enum named `s`; throws invalid_argument "expected relu or tanh, got "x"" (the caller adds
// the field's name).
template <class E> E parse_enum(std::string_view s) {
  const auto& n = EnumNames<E>::names;
  for (std::size_t i = 0; i < std::size(n); ++i) {
    if (n[i] == s) return static_cast<E>(i);
  }
  fail(Code::invalid_argument, "expected " + enum_choices<E>() + ", got \"" + shorten(s) + "\"");
}

// One later graph of a gossip run: `graph` from `at` epochs (or steps) on.
struct ScheduleEntry {
  double at = 0;
  bool in_epochs = true;
  std::string graph;  // a kind, a .json graph file, or "hosts"
  bool operator==(const ScheduleEntry&) const = default;
};
// "epoch:5=exponential,step:300=ring"; errors name the entry: entry 0 "epoch:x=ring": ...
std::vector<ScheduleEntry> parse_topology_schedule(const std::string& text);
std::string to_string(const std::vector<ScheduleEntry>& schedule);

struct TrainConfig {
  std::string data = "data/fashion-mnist";  // folder written by `dpgossip prepare`
  std::vector<int> hidden = {256};           // hidden layer widths
  Activation activation = Activation::tanh;
  double epochs = 40;
  double batch_size = 4096;                  // expected batch size (q * n under Poisson sampling)
  Sampling sampling = Sampling::poisson;     // or fixed-size shuffled batches
  long long physical_batch = 0;              // rows a pass holds (virtual batches); 0: all
  double batch_memory_mib = 0;               // or as many rows as fit in this; 0: no cap
  double lr = 1.0;
  double momentum = 0.9;
  double weight_decay = 0.0;
  LrSchedule lr_schedule = LrSchedule::constant;
  double ema_decay = 0.995;                  // 0: off; else average of the iterates
  bool dp = true;                            // false: plain SGD, no clipping, no noise
  double clip_norm = 1.0;
  double noise_multiplier = 0.0;             // 0: calibrate to target_epsilon
  double target_epsilon = 3.0;
  PrivacyTarget target = PrivacyTarget::model;  // whose epsilon target_epsilon is
  double delta = 1e-5;
  // Calibrates sigma to target_epsilon and computes every reported epsilon: pld (privacy loss
  // distributions, the tight default) or rdp (Renyi DP, as Opacus; needs more noise).
  PrivacyAccountant accountant = PrivacyAccountant::pld;
  std::uint64_t seed = 0;                    // initialisation
  // Seeds the Poisson sampler and the noise. 0 (default): drawn from the OS at start and never
  // printed, because the guarantee needs the noise and the batch membership to be secret. Set it
  // only for reproducible experiments, knowing that whoever knows it can subtract the noise.
  std::uint64_t noise_seed = 0;
  // With more than one peer a noise_seed is refused unless this acknowledges that every peer
  // holding the config can compute the others' noise and batches.
  bool insecure_fixed_seed = false;
  // The noise from ChaCha20 under a 256-bit key from getrandom(2), never stored (dp/secure_noise.h),
  // instead of the counter hash under the 64-bit noise seed. Refused together with a noise_seed.
  bool secure_noise = false;
  // allreduce only. Secure aggregation (docs/PRIVACY.md): each peer puts its clipped sum on an
  // integer grid, adds its share of Skellam noise there, and masks it with pairwise keys agreed
  // by X25519; the all-reduce sums integers modulo 2^32, the masks cancel, and every peer learns
  // the noised sum and nothing else, so the model's epsilon holds against the other peers too.
  bool secure_aggregation = false;
  int threads = 2;                           // BLAS threads
  // Where this peer's gradient is computed: cpu, or a CUDA GPU (runtime/model/device_mlp.h):
  // cuda:N, or cuda for GPU (rank mod the number of GPUs). See parse_device.
  std::string device = "cpu";
  Algo algo = Algo::single;
  // allreduce only. distributed: each of N peers adds N(0, sigma^2 C^2 / N), so the sum carries
  // the central noise. local: each peer adds N(0, sigma^2 C^2), so every message is itself DP.
  NoiseMode noise_mode = NoiseMode::distributed;
  // gossip only. A kind (ring, torus, hypercube, exponential, symmetric-exponential,
  // one-peer-exponential, complete, star, random-regular) or a JSON graph file (a name ending in
  // .json), with the weight rule, degree and seed of the generators (docs/TOPOLOGY.md).
  std::string topology = "ring";
  TopologyWeights topology_weights = TopologyWeights::metropolis;
  int topology_degree = 0;                      // random-regular: d (0: the generator's default)
  std::uint64_t topology_seed = 0;              // random-regular
  // gossip only. Later graphs: "epoch:5=exponential,step:300=ring" switches every peer to the
  // named graph at that epoch (or step) boundary. Empty keeps `topology` for the whole run.
  std::vector<ScheduleEntry> topology_schedule;
  // gossip only. same: every peer starts from rank 0's initial model (D-PSGD's x_0). independent:
  // each peer initialises with seed + rank, to watch disagreement decay (with lr 0, plain gossip).
  Init init = Init::same;
  int metrics_every = 5;                        // gossip: consensus distance every K steps (0: off)
  // gossip: the K-step metrics also evaluate each peer's model and the peers' mean on the first
  // this many test rows (0: the consensus distance only; every epoch uses the whole split).
  int metrics_eval_rows = 1000;
  std::string run_name;                         // the "run" of every metrics line ("": generated)
  EvalSplit eval_split = EvalSplit::test;       // what the epoch lines and the summary evaluate
  // Put this peer's counts of examples dropped for a non-finite value and of batches skipped
  // (every example non-finite) in its metrics lines and summary. Off by default: the counts
  // depend on the private data and no noise covers them (docs/PRIVACY.md, outputs).
  bool report_dropped = false;
  // Put the training loss and accuracy of this peer's own batches in its epoch lines. Off by
  // default: they are computed from private batches without noise (docs/PRIVACY.md, outputs).
  bool report_train_metrics = false;
  double timeout_s = 60;                     // every network wait, and the connection set-up
  TransportMode transport = TransportMode::automatic;  // shared memory on one host, else TCP
  std::string metrics = "runs/metrics.jsonl";  // JSON-lines file, appended ("" = none)
  int servers = 1;             // ps-sync / ps-async: ranks 0..servers-1 each hold a shard
  int max_staleness = 4;       // ps-async: how far ahead of the slowest worker one may run
  int local_steps = 4;         // local-sgd: local DP steps between model averages
  int group_size = 2;          // partial-allreduce: peers a group averages (at most)
  long long bucket_bytes = 0;  // allreduce: 0 = one all-reduce after backward; else buckets
  bool hierarchical = false;   // allreduce, local-sgd: within each host first (hierarchical.h)
  // Uneven peers: speed measures each peer on public work at the start and gives it a share of
  // the batch proportional to its speed: from a data folder prepared whole, by re-sharding (the
  // same sampling rate everywhere); from one with a shard per peer, by its sampling rate.
  Balance balance = Balance::off;
  // K > 0: balance by speed, measuring and re-sharding every K epochs (0: balance alone says).
  int balance_every = 0;
  // balance_every over a shard per peer: a peer's rate stays at most this times the global rate,
  // and the noise is calibrated for that rate.
  double balance_rate_cap = 2;
  std::string trace;           // Chrome trace file to write ("" = none)
  // Checkpoints (docs/RELIABILITY.md). Each peer writes its own, under checkpoint_dir/rank-R.
  std::string checkpoint_dir;        // "" = none
  long long checkpoint_every = 0;    // steps between checkpoints (0: only when stopped)
  int checkpoint_keep = 3;           // each peer keeps its newest K checkpoints
  bool resume = false;               // continue from the newest checkpoint every peer has
  // Steps between the points where the peers agree whether a signal asked them to stop (one
  // 8-byte all-reduce each, which a small model's step feels); every epoch's start and every
  // checkpoint step are such points too. 0: every 10 steps, or for the asynchronous algorithms
  // only those (each point is a meeting of every peer, which they otherwise never have).
  long long stop_check_every = 0;
};

// One row of the table: everything the readers, writers and the command line know of a field.
// The operations are generated from the member's type (see train_config.cc).
struct ConfigField {
  std::string key;           // JSON key, and the name in errors ("/lr") and describe()
  std::string flag;          // "--lr"; a bool field also gets "--no-..."
  std::string help;          // with the choices (for an enum) and the default appended
  bool shared = true;        // part of the handshake hash (false: a per-peer setting)
  bool secret = false;       // never printed by describe()
  bool is_bool = false;      // a switch: --flag / --no-flag instead of a value
  // Shared by the peers (in the handshake hash) but free to change when a run is resumed: it
  // drives the run (checkpoints, timeouts, stopping) without changing what it computes, so it is
  // not part of training_settings_hash().
  bool run_control = false;
  std::function<void(TrainConfig&, const JsonReader&)> read;  // errors name the JSON path
  std::function<Json(const TrainConfig&)> write;
  // The flag's text: "0.1", "256,256", "cosine", "true" (errors name no field; add it).
  std::function<void(TrainConfig&, const std::string&)> parse;
  std::function<std::string(const TrainConfig&)> show;  // as the flag would take it
  std::function<void(const TrainConfig&)> check;        // the range; throws "/key: ..."
  std::function<bool(const TrainConfig&)> is_default;   // the value TrainConfig{} has
  // The algorithms the field means something to (empty: all). validate() refuses another value
  // than the default with any other algorithm, rather than ignore it.
  std::vector<Algo> only_for;

  // Table modifiers: field(...).per_peer(), field(...).secret_value().
  ConfigField per_peer() && {
    shared = false;
    return std::move(*this);
  }
  ConfigField secret_value() && {
    secret = true;
    return std::move(*this);
  }
  ConfigField control() && {
    run_control = true;
    return std::move(*this);
  }
  ConfigField only_with(std::vector<Algo> algos) && {
    only_for = std::move(algos);
    return std::move(*this);
  }
};

// The table, in the order describe() and --help list the fields.
const std::vector<ConfigField>& config_fields();

// The device of `device` ("cpu", "cuda", "cuda:N"): cuda false for the CPU; index N, or -1 for
// "cuda" (GPU rank mod count). Throws invalid_argument naming the field otherwise.
struct DeviceChoice {
  bool cuda = false;
  int index = -1;
};
DeviceChoice parse_device(const std::string& device);

// The epochs a run reports: `epochs` rounded up (the last one may be partial), at least 1, since
// every run takes at least one step and its last epoch ends at the last step. A hair over an
// integer (40.0000000001 from arithmetic) does not make an epoch of its own.
int epoch_count(const TrainConfig& c);

// Reads a config object; errors name `where` and the JSON path ("cfg.json: /lr: ...").
TrainConfig train_config_from_json(const Json& j, const std::string& where);
Json to_json(const TrainConfig& c);
// A hash of the settings every peer of one run must share (everything except the per-peer
// fields: data folder, thread count, metrics and trace files, run name, the secret noise seed),
// for the handshake.
std::uint64_t shared_settings_hash(const TrainConfig& c);
// The shared fields that decide what a run computes (shared, not run_control), as JSON and as a
// hash: a checkpoint records them, and a resumed run must have the same.
Json training_settings(const TrainConfig& c);
std::uint64_t training_settings_hash(const TrainConfig& c);
// Checks each field's range and the rules between fields; errors name the field ("/lr: ...").
void validate(const TrainConfig& c);
// One line for the start of a run: "algo=gossip epochs=40 ..." (the noise seed is not shown).
std::string describe(const TrainConfig& c);

// The non-private baseline's own defaults (docs/RECIPE.md, "Without privacy"): the DP recipe's
// learning rate and expected batch of 4096 suit noisy gradients, not plain SGD. A config with
// dp false takes each of these that neither its file nor its flags set (`set` holds the keys
// that were set); a DP config is returned unchanged.
const Json& no_dp_defaults();
void apply_no_dp_defaults(TrainConfig& c, const std::set<std::string>& set);

}  // namespace dpg
