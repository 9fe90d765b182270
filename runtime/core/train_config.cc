#include "runtime/core/train_config.h"

#include <algorithm>

#include <charconv>
#include <cmath>
#include <concepts>
#include <limits>
#include <type_traits>

#include "runtime/core/bounds.h"
#include "runtime/core/hash.h"
#include "runtime/core/range.h"

namespace dpg {

std::string to_string(Algo a) { return std::string(EnumNames<Algo>::names[static_cast<int>(a)]); }
std::string to_string(Activation a) {
  return std::string(EnumNames<Activation>::names[static_cast<int>(a)]);
}
std::string to_string(NoiseMode m) {
  return std::string(EnumNames<NoiseMode>::names[static_cast<int>(m)]);
}
std::string to_string(Sampling s) {
  return std::string(EnumNames<Sampling>::names[static_cast<int>(s)]);
}
std::string to_string(TopologyWeights w) {
  return std::string(EnumNames<TopologyWeights>::names[static_cast<int>(w)]);
}
std::string to_string(LrSchedule s) {
  return std::string(EnumNames<LrSchedule>::names[static_cast<int>(s)]);
}
std::string to_string(Init i) { return std::string(EnumNames<Init>::names[static_cast<int>(i)]); }
std::string to_string(PrivacyAccountant a) {
  return std::string(EnumNames<PrivacyAccountant>::names[static_cast<int>(a)]);
}
std::string to_string(TransportMode m) {
  return std::string(EnumNames<TransportMode>::names[static_cast<int>(m)]);
}
std::string to_string(EvalSplit s) {
  return std::string(EnumNames<EvalSplit>::names[static_cast<int>(s)]);
}
std::string to_string(PrivacyTarget t) {
  return std::string(EnumNames<PrivacyTarget>::names[static_cast<int>(t)]);
}
std::string to_string(Balance b) {
  return std::string(EnumNames<Balance>::names[static_cast<int>(b)]);
}

namespace {

constexpr double kMaxScheduleAt = 1e12;  // epochs or steps of a topology schedule entry

[[noreturn]] void bad(const std::string& what) { fail(Code::invalid_argument, what); }

std::string num(double v) { return number_text(v); }

// A whole string as a double, or nothing.
bool read_double(const std::string& s, double& v) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace

std::vector<ScheduleEntry> parse_topology_schedule(const std::string& s) {
  std::vector<ScheduleEntry> out;
  std::size_t begin = 0;
  while (begin < s.size()) {
    std::size_t end = s.find(',', begin);
    if (end == std::string::npos) end = s.size();
    const std::string entry = s.substr(begin, end - begin);
    const std::string field = "entry " + std::to_string(out.size()) + " \"" + shorten(entry) + "\"";
    const std::size_t colon = entry.find(':'), eq = entry.find('=');
    if (colon == std::string::npos || eq == std::string::npos || eq < colon) {
      bad(field + ": expected epoch:E=GRAPH or step:S=GRAPH");
    }
    const std::string unit = entry.substr(0, colon);
    if (unit != "epoch" && unit != "step") {
      bad(field + ": the unit is epoch or step, not \"" + unit + "\"");
    }
    ScheduleEntry e;
    e.in_epochs = unit == "epoch";
    e.graph = entry.substr(eq + 1);
    if (!read_double(entry.substr(colon + 1, eq - colon - 1), e.at)) {
      bad(field + ": not a number before '='");
    }
    if (!(e.at > 0) || !std::isfinite(e.at)) bad(field + ": must start after the first round");
    // Later converted to a step count (a long long): keep it far from overflowing one.
    if (e.at > kMaxScheduleAt) bad(field + ": must be at most " + num(kMaxScheduleAt));
    if (e.graph.empty()) bad(field + ": no graph after '='");
    for (std::size_t k = 0; k < out.size(); ++k) {
      if (out[k].in_epochs == e.in_epochs && !(out[k].at < e.at)) {
        bad(field + ": must come after entry " + std::to_string(k) + " (" + unit + " " +
            num(out[k].at) + ")");
      }
    }
    out.push_back(std::move(e));
    begin = end + 1;
  }
  return out;
}

std::string to_string(const std::vector<ScheduleEntry>& schedule) {
  std::string out;
  for (const auto& e : schedule) {
    if (!out.empty()) out += ',';
    out += e.in_epochs ? "epoch:" : "step:";
    out += num(e.at) + "=" + e.graph;
  }
  return out;
}

namespace {

// ---- What each member type means in JSON, on the command line and in describe() ----------

template <class T> constexpr bool is_enum_v = std::is_enum_v<T>;
template <class T> constexpr bool is_int_v = std::integral<T> && !std::same_as<T, bool>;

template <class T> T int_from(long long s, unsigned long long u, bool is_unsigned) {
  if (is_unsigned) {
    if (u > static_cast<unsigned long long>(std::numeric_limits<T>::max())) {
      bad("out of range: at most " + std::to_string(std::numeric_limits<T>::max()) + ", got " +
          std::to_string(u));
    }
    return static_cast<T>(u);
  }
  if (s < 0 && std::is_unsigned_v<T>) bad("must be non-negative, got " + std::to_string(s));
  if (!std::is_unsigned_v<T> && (s < static_cast<long long>(std::numeric_limits<T>::min()) ||
                                 s > static_cast<long long>(std::numeric_limits<T>::max()))) {
    bad("out of range, got " + std::to_string(s));
  }
  return static_cast<T>(s);
}

template <class T> T value_from_json(const Json& j) {
  if constexpr (std::same_as<T, double>) {
    if (!j.is_number()) bad("expected a number, got " + shorten(j.dump()));
    return j.get<double>();
  } else if constexpr (std::same_as<T, bool>) {
    if (!j.is_boolean()) bad("expected true or false, got " + shorten(j.dump()));
    return j.get<bool>();
  } else if constexpr (is_int_v<T>) {
    if (!j.is_number_integer()) bad("expected an integer, got " + shorten(j.dump()));
    if (j.is_number_unsigned()) return int_from<T>(0, j.get<unsigned long long>(), true);
    return int_from<T>(j.get<long long>(), 0, false);
  } else if constexpr (std::same_as<T, std::vector<int>>) {
    if (!j.is_array()) bad("expected an array of integers, got " + shorten(j.dump()));
    T out;
    for (const auto& w : j) {
      if (!w.is_number_integer()) bad("expected an array of integers, got " + shorten(j.dump()));
      out.push_back(value_from_json<int>(w));
    }
    return out;
  } else {  // string, enum, schedule: all strings in JSON
    if (!j.is_string()) bad("expected a string, got " + shorten(j.dump()));
    const std::string s = j.get<std::string>();
    if constexpr (std::same_as<T, std::string>) return s;
    else if constexpr (is_enum_v<T>) return parse_enum<T>(s);
    else return parse_topology_schedule(s);
  }
}

template <class T> T value_from_text(const std::string& s) {
  if constexpr (std::same_as<T, double>) {
    double v = 0;
    if (!read_double(s, v)) bad("expected a number, got \"" + shorten(s) + "\"");
    return v;
  } else if constexpr (std::same_as<T, bool>) {
    if (s == "true" || s == "false") return s == "true";
    bad("expected true or false, got \"" + shorten(s) + "\"");
  } else if constexpr (is_int_v<T>) {
    T v{};
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec == std::errc::result_out_of_range) {
      bad("out of range for this field (" + std::to_string(std::numeric_limits<T>::min()) + " to " +
          std::to_string(std::numeric_limits<T>::max()) + "), got \"" + shorten(s) + "\"");
    }
    if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size()) {
      bad("expected " + std::string(std::is_unsigned_v<T> ? "a non-negative " : "an ") +
          "integer, got \"" + shorten(s) + "\"");
    }
    return v;
  } else if constexpr (std::same_as<T, std::vector<int>>) {
    T out;
    std::size_t begin = 0;
    while (begin <= s.size() && !s.empty()) {
      std::size_t end = s.find(',', begin);
      if (end == std::string::npos) end = s.size();
      int v = 0;
      const auto r = std::from_chars(s.data() + begin, s.data() + end, v);
      if (end == begin || r.ec != std::errc() || r.ptr != s.data() + end) {
        bad("expected comma-separated integers, got \"" + shorten(s) + "\"");
      }
      out.push_back(v);
      begin = end + 1;
    }
    if (out.empty()) bad("empty list");
    return out;
  } else if constexpr (std::same_as<T, std::string>) {
    return s;
  } else if constexpr (is_enum_v<T>) {
    return parse_enum<T>(s);
  } else {
    return parse_topology_schedule(s);
  }
}

template <class T> Json json_of(const T& v) {
  if constexpr (is_enum_v<T> || std::same_as<T, std::vector<ScheduleEntry>>) return to_string(v);
  else return v;
}

template <class T> std::string text_of(const T& v) {
  if constexpr (std::same_as<T, double>) return num(v);
  else if constexpr (std::same_as<T, bool>) return v ? "true" : "false";
  else if constexpr (is_int_v<T>) return std::to_string(v);
  else if constexpr (std::same_as<T, std::string>) return v.empty() ? "\"\"" : v;
  else if constexpr (std::same_as<T, std::vector<int>>) {
    std::string out;
    for (int w : v) {
      if (!out.empty()) out += ',';
      out += std::to_string(w);
    }
    return out;
  } else {
    const std::string s = to_string(v);  // enum, schedule
    return s.empty() ? "\"\"" : s;
  }
}

// ---- Validation rules --------------------------------------------------------------------

// A numeric range (runtime/core/range.h). Of a list (hidden), every element.
struct NonEmpty {};  // a string that must not be ""
struct Any {};       // no rule (enums: the parse is the rule)

template <class T> void check_rule(const std::string& key, const T& v, const Range& r) {
  auto one = [&](double x, const std::string& what) {
    if (!r.contains(x)) bad("/" + key + ": " + what + r.rule() + ", got " + num(x));
  };
  if constexpr (std::same_as<T, std::vector<int>>) {
    for (int w : v) one(w, "every entry ");
  } else {
    one(static_cast<double>(v), "");
  }
}
inline void check_rule(const std::string& key, const std::string& v, NonEmpty) {
  if (v.empty()) bad("/" + key + ": must not be empty");
}
template <class T> void check_rule(const std::string&, const T&, Any) {}

// ---- One row of the table -------------------------------------------------------------------

template <class T, class Rule = Any>
ConfigField field(T TrainConfig::*m, std::string key, std::string flag, std::string help,
                  Rule rule = {}) {
  ConfigField f;
  f.key = key;
  f.flag = std::move(flag);
  f.is_bool = std::same_as<T, bool>;
  if constexpr (is_enum_v<T>) {  // the choices, unless the help already names each
    bool named = true;
    for (auto n : EnumNames<T>::names) named = named && help.find(n) != std::string::npos;
    if (!named) help += " (" + enum_choices<T>() + ")";
  }
  const std::string d = text_of(TrainConfig{}.*m);
  f.help = help + " [default " + d + "]";
  f.read = [m, key](TrainConfig& c, const JsonReader& r) {
    if (!r.has(key)) return;
    try {
      c.*m = value_from_json<T>(r.at(key));
    } catch (const Error& e) {
      r.fail_at(key, e.what());
    }
  };
  f.write = [m](const TrainConfig& c) { return json_of(c.*m); };
  f.parse = [m](TrainConfig& c, const std::string& s) { c.*m = value_from_text<T>(s); };
  f.show = [m](const TrainConfig& c) { return text_of(c.*m); };
  f.check = [m, key, rule](const TrainConfig& c) { check_rule(key, c.*m, rule); };
  f.is_default = [m](const TrainConfig& c) { return c.*m == TrainConfig{}.*m; };
  return f;
}

using C = TrainConfig;

// Every field, once. Adding one: a member in TrainConfig and a line here.
std::vector<ConfigField> make_table() {
  // The algorithms the load balancer serves (every one of several peers).
  const std::vector<Algo> balanced = {Algo::allreduce, Algo::gossip,    Algo::ps_sync,
                                      Algo::ps_async,  Algo::local_sgd, Algo::ad_psgd,
                                      Algo::partial_allreduce};
  return {
      field(&C::algo, "algo", "--algo",
            "single (one process), allreduce (data-parallel over the hosts file), gossip "
            "(D-PSGD), ps-sync / ps-async (parameter servers), local-sgd (periodic model "
            "averages), ad-psgd (asynchronous gossip) or partial-allreduce (averages within "
            "groups of the peers ready together)"),
      field(&C::data, "data", "--data", "prepared data folder", NonEmpty{}).per_peer(),
      field(&C::hidden, "hidden", "--hidden", "hidden widths, e.g. 256,256", between(1, 1 << 20)),
      field(&C::activation, "activation", "--activation", "activation"),
      field(&C::epochs, "epochs", "--epochs", "epochs", positive_up_to(1e6)),
      field(&C::batch_size, "batch_size", "--batch-size", "expected batch size (Poisson: q * n)",
            between(1, 1e9)),
      field(&C::sampling, "sampling", "--sampling", "batch sampling"),
      field(&C::physical_batch, "physical_batch", "--physical-batch",
            "virtual batches: the most examples one forward and backward pass holds; a larger "
            "batch goes through in pieces whose clipped sums add up, noised once (0: the whole "
            "batch in one pass)",
            between(0, 1e9))
          .per_peer(),
      field(&C::batch_memory_mib, "batch_memory_mib", "--batch-memory",
            "virtual batches by memory: the most MiB a pass's per-example buffers take; the "
            "physical batch is the most rows that fit (with --physical-batch, the smaller of "
            "the two; 0: no cap)",
            between(0, 1 << 24))
          .per_peer(),
      field(&C::lr, "lr", "--lr", "learning rate", at_least(0)),
      field(&C::momentum, "momentum", "--momentum", "SGD momentum", below_one()),
      field(&C::weight_decay, "weight_decay", "--weight-decay", "L2 weight decay", at_least(0)),
      field(&C::lr_schedule, "lr_schedule", "--lr-schedule", "learning-rate schedule"),
      field(&C::ema_decay, "ema_decay", "--ema-decay", "parameter average decay (0: off)",
            below_one()),
      field(&C::dp, "dp", "--dp", "DP-SGD; --no-dp: plain SGD, no clipping, no noise"),
      field(&C::clip_norm, "clip_norm", "--clip-norm", "per-example clip norm C", positive()),
      field(&C::noise_multiplier, "noise_multiplier", "--noise-multiplier",
            "sigma (noise sd is sigma * C; 0: calibrate to the target epsilon)", at_least(0)),
      field(&C::target_epsilon, "target_epsilon", "--target-epsilon",
            "calibrate sigma to this epsilon"),
      field(&C::target, "target", "--target",
            "whose epsilon --target-epsilon is: the released model's, or every peer's "
            "messages' (allreduce then adds the full noise on every peer, as --noise-mode local)"),
      field(&C::delta, "delta", "--delta", "delta", probability()),
      field(&C::accountant, "accountant", "--accountant",
            "privacy accountant calibrating sigma and reporting epsilon: pld (privacy loss "
            "distributions, tight) or rdp (Renyi DP, as Opacus)"),
      field(&C::seed, "seed", "--seed", "seed for the initialisation"),
      field(&C::noise_seed, "noise_seed", "--noise-seed",
            "seed for sampling and noise (0: secret, from the OS; set only to reproduce a run, "
            "since it reveals the noise)")
          .per_peer()
          .secret_value(),
      field(&C::insecure_fixed_seed, "insecure_fixed_seed", "--insecure-fixed-seed",
            "allow a noise_seed with more than one peer (every peer can then compute the "
            "others' noise and batches)")
          .per_peer(),
      field(&C::secure_noise, "secure_noise", "--secure-noise",
            "noise from ChaCha20 keyed by 256 bits from the OS (docs/PRIVACY.md)"),
      field(&C::secure_aggregation, "secure_aggregation", "--secure-aggregation",
            "allreduce: integer Skellam noise and pairwise masks, summed modulo 2^32, so the "
            "model's epsilon holds against the other peers (docs/PRIVACY.md)"),
      field(&C::threads, "threads", "--threads", "BLAS threads", between(1, 256)).per_peer(),
      field(&C::device, "device", "--device",
            "cpu, or cuda:N / cuda (GPU rank mod count): forward, backward, clipping and noise on "
            "that GPU, with the training rows resident there",
            NonEmpty{})
          .per_peer(),
      field(&C::noise_mode, "noise_mode", "--noise-mode",
            "allreduce: distributed (the sum carries the central noise) or local (every message "
            "is DP on its own); gossip is always local"),
      field(&C::topology, "topology", "--topology",
            "gossip: graph kind (ring, torus, hypercube, exponential, symmetric-exponential, "
            "one-peer-exponential, complete, star, random-regular), a .json graph file, or hosts "
            "(the hosts file's topology)",
            NonEmpty{}),
      field(&C::topology_weights, "topology_weights", "--topology-weights", "gossip: weight rule"),
      field(&C::topology_degree, "topology_degree", "--topology-degree",
            "random-regular: the degree (0: the generator's default)", between(0, 65536)),
      field(&C::topology_seed, "topology_seed", "--topology-seed", "random-regular: the seed"),
      field(&C::topology_schedule, "topology_schedule", "--topology-schedule",
            "gossip: later graphs, e.g. epoch:5=exponential,step:300=ring"),
      field(&C::init, "init", "--init",
            "gossip: same (rank 0's model everywhere) or independent (seed + rank)"),
      field(&C::metrics_every, "metrics_every", "--metrics-every",
            "consensus distance every K steps where the peers' models differ (0: off)", between(0, 1e9)),
      field(&C::metrics_eval_rows, "metrics_eval_rows", "--metrics-eval-rows",
            "gossip: test rows each K-step metrics line evaluates the models on (0: none)",
            between(0, 1e9)),
      field(&C::servers, "servers", "--servers",
            "ps-sync / ps-async: ranks 0..K-1 each hold a contiguous shard of the parameters",
            between(1, 1024))
          .only_with({Algo::ps_sync, Algo::ps_async}),
      field(&C::max_staleness, "max_staleness", "--max-staleness",
            "ps-async: a worker more than K steps ahead of the slowest waits for its reply",
            between(0, 1e6))
          .only_with({Algo::ps_async}),
      field(&C::local_steps, "local_steps", "--local-steps",
            "local-sgd: local DP steps between model averages", between(1, 1e6))
          .only_with({Algo::local_sgd}),
      field(&C::group_size, "group_size", "--group-size",
            "partial-allreduce: a group averages the models of up to K peers, the first K "
            "ready (fewer when nobody else is ready within the patience)",
            between(2, 1024))
          .only_with({Algo::partial_allreduce}),
      field(&C::bucket_bytes, "bucket_bytes", "--bucket-bytes",
            "allreduce: 0 = one all-reduce of the gradient after the backward pass; else "
            "all-reduce buckets of this many bytes as the backward pass produces them",
            between(0, 1099511627776.0))
          .only_with({Algo::allreduce}),
      field(&C::hierarchical, "hierarchical", "--hierarchical",
            "allreduce, local-sgd: sum (average) within each host (the hosts file's host) "
            "first: a reduce-scatter there, each shard across hosts, an all-gather back")
          .only_with({Algo::allreduce, Algo::local_sgd}),
      field(&C::balance, "balance", "--balance",
            "off, or speed: each peer's share of the batch proportional to its speed on public "
            "work, measured at the start (a folder prepared whole is re-sharded, so every peer "
            "keeps the global sampling rate; with a shard per peer its rate changes)")
          .only_with(balanced),
      field(&C::balance_every, "balance_every", "--balance-every",
            "K > 0: balance by speed (as balance speed) and measure the peers again every K "
            "epochs: a folder prepared whole is re-sharded, with a shard per peer each peer's "
            "rate changes, up to balance_rate_cap (0: balance speed measures at the start only)",
            between(0, 1000000))
          .only_with(balanced),
      field(&C::balance_rate_cap, "balance_rate_cap", "--balance-rate-cap",
            "balance_every over a shard per peer: the highest sampling rate a peer may be "
            "given, as a multiple of the global rate batch_size / all rows; the noise is "
            "calibrated for it, so that no peer's epsilon passes the target",
            between(1, 1000))
          .only_with(balanced),
      field(&C::timeout_s, "timeout_s", "--timeout-s", "timeout of every network wait, in seconds",
            positive_up_to(1e6))
          .control(),
      field(&C::transport, "transport", "--transport",
            "auto (shared memory with the peers the hosts file puts on this host, TCP with the "
            "rest), tcp, shm (every peer on this host), or nccl (with device cuda and allreduce, "
            "local-sgd or gossip: their messages GPU to GPU through NCCL, everything else as auto)")
          .control(),
      field(&C::run_name, "run_name", "--run-name", "the run id of the metrics lines (\"\": generated)")
          .per_peer(),
      field(&C::metrics, "metrics", "--metrics", "JSON-lines metrics file to append to (\"\": none)")
          .per_peer(),
      field(&C::eval_split, "eval_split", "--eval-split",
            "what every epoch and the summary evaluate: the test split, or the validation rows "
            "`prepare --validation N` held out (to tune on)")
          .control(),
      field(&C::report_dropped, "report_dropped", "--report-dropped",
            "put this peer's counts of examples dropped for non-finite values and of skipped "
            "batches in its metrics and summary (data-dependent, not covered by epsilon)")
          .per_peer(),
      field(&C::report_train_metrics, "report_train_metrics", "--report-train-metrics",
            "put the training loss and accuracy of rank 0's own batches in the epoch lines and "
            "the progress line (un-noised values of private data, not covered by epsilon)")
          .per_peer(),
      field(&C::trace, "trace", "--trace",
            "Chrome trace file rank 0 writes from every peer's timeline (\"\": none); a step's "
            "times follow its realised private batch, not covered by epsilon")
          .per_peer(),
      field(&C::checkpoint_dir, "checkpoint_dir", "--checkpoint-dir",
            "folder of this peer's checkpoints (rank-R/ inside; \"\": none)")
          .per_peer(),
      field(&C::checkpoint_every, "checkpoint_every", "--checkpoint-every",
            "steps between checkpoints (0: only when a signal stops the run)", between(0, 1e12))
          .control(),
      field(&C::checkpoint_keep, "checkpoint_keep", "--checkpoint-keep",
            "newest checkpoints each peer keeps", between(1, 1000))
          .control(),
      field(&C::resume, "resume", "--resume",
            "continue from the newest checkpoint every peer has (none anywhere: from the start)")
          .control(),
      field(&C::stop_check_every, "stop_check_every", "--stop-check-every",
            "steps between the peers' agreement to stop on a signal, besides each epoch's start "
            "and each checkpoint (0: 10, or none for ps-async and ad-psgd)",
            between(0, 1e12))
          .control(),
  };
}

}  // namespace

int epoch_count(const TrainConfig& c) {
  return std::max(1, static_cast<int>(std::ceil(c.epochs - 1e-9)));
}

const std::vector<ConfigField>& config_fields() {
  static const std::vector<ConfigField> table = make_table();
  return table;
}

TrainConfig train_config_from_json(const Json& j, const std::string& where) {
  JsonReader r(j, where);
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const auto& f : config_fields()) known = known || f.key == key;
    if (!known) r.fail_at(key, "unknown field");
  }
  TrainConfig c;
  for (const auto& f : config_fields()) f.read(c, r);
  try {
    validate(c);
  } catch (const Error& e) {
    fail(e.code(), where + e.what());
  }
  return c;
}

Json to_json(const TrainConfig& c) {
  Json j = Json::object();
  for (const auto& f : config_fields()) j[f.key] = f.write(c);
  return j;
}

std::uint64_t shared_settings_hash(const TrainConfig& c) {
  Json j = Json::object();
  for (const auto& f : config_fields()) {
    if (f.shared) j[f.key] = f.write(c);
  }
  return fnv1a64(j.dump());  // the canonical dump: keys sorted
}

Json training_settings(const TrainConfig& c) {
  Json j = Json::object();
  for (const auto& f : config_fields()) {
    if (f.shared && !f.run_control) j[f.key] = f.write(c);
  }
  return j;
}

std::uint64_t training_settings_hash(const TrainConfig& c) {
  return fnv1a64(training_settings(c).dump());
}

DeviceChoice parse_device(const std::string& device) {
  if (device == "cpu") return {};
  if (device == "cuda") return {true, -1};
  if (device.starts_with("cuda:") && device.size() > 5 && device.size() <= 9 &&
      std::all_of(device.begin() + 5, device.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    return {true, std::stoi(device.substr(5))};
  }
  bad("/device: expected cpu, cuda or cuda:N, got \"" + device + "\"");
  return {};
}

void validate(const TrainConfig& c) {
  for (const auto& f : config_fields()) {
    f.check(c);
    if (f.only_for.empty() || f.is_default(c)) continue;
    if (std::find(f.only_for.begin(), f.only_for.end(), c.algo) != f.only_for.end()) continue;
    std::vector<std::string> names;
    for (Algo a : f.only_for) names.push_back(to_string(a));
    bad("/" + f.key + ": only with algo " + or_list(names) + ", not " + to_string(c.algo) +
        ", which would ignore it (leave it out, or at its default " + f.show(TrainConfig{}) + ")");
  }
  parse_device(c.device);
  // Rules between fields.
  if (c.dp && !(c.noise_multiplier > 0) && !(c.target_epsilon > 0)) {
    bad("/target_epsilon: must be positive when noise_multiplier is not given");
  }
  if (c.dp && c.secure_noise && c.noise_seed != 0) {
    bad("/noise_seed: secure_noise draws its key from the OS and cannot use a fixed seed");
  }
  if (c.checkpoint_dir.empty() && c.checkpoint_every > 0) {
    bad("/checkpoint_every: needs a checkpoint_dir to write to");
  }
  if (c.checkpoint_dir.empty() && c.resume) bad("/resume: needs a checkpoint_dir to resume from");

  if (c.algo == Algo::allreduce && c.hierarchical && c.bucket_bytes > 0) {
    bad("/hierarchical: not with bucket_bytes (the buckets' all-reduce is flat)");
  }
}

const Json& no_dp_defaults() {
  // The recipe's model (784-256-10 tanh), so that the two runs differ by privacy alone.
  static const Json defaults = {
      {"epochs", 15}, {"batch_size", 128}, {"lr", 0.05}, {"lr_schedule", "cosine"}};
  return defaults;
}

void apply_no_dp_defaults(TrainConfig& c, const std::set<std::string>& set) {
  if (c.dp) return;
  for (const auto& f : config_fields()) {
    if (!no_dp_defaults().contains(f.key) || set.count(f.key)) continue;
    const Json one = {{f.key, no_dp_defaults()[f.key]}};
    f.read(c, JsonReader(one, "no_dp_defaults:"));
  }
}

std::string describe(const TrainConfig& c) {
  std::string out;
  for (const auto& f : config_fields()) {
    if (f.secret) continue;
    if (!out.empty()) out += ' ';
    out += f.key + "=" + f.show(c);
  }
  return out;
}

}  // namespace dpg
