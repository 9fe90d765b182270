#include "runtime/core/train_config.h"

#include "runtime/core/error.h"
#include "runtime/core/hash.h"

namespace dpg {

TrainConfig train_config_from_json(const Json& j, const std::string& where) {
  JsonReader r(j, where);
  r.reject_unknown({"data", "hidden", "activation", "epochs", "batch_size", "sampling", "lr",
                    "momentum", "weight_decay", "lr_schedule", "ema_decay", "dp", "clip_norm",
                    "noise_multiplier", "target_epsilon", "delta", "seed", "noise_seed", "threads",
                    "metrics", "algo", "noise_mode", "timeout_s", "topology",
                    "topology_weights", "topology_degree", "topology_seed", "topology_schedule",
                    "init", "metrics_every", "metrics_eval_rows", "run_name"});
  TrainConfig c;
  if (r.has("data")) c.data = r.string("data");
  if (r.has("hidden")) {
    const Json& h = r.at("hidden");
    if (!h.is_array()) r.fail_at("hidden", "expected an array of widths, got " + h.dump());
    c.hidden.clear();
    for (const auto& w : h) {
      if (!w.is_number_integer()) r.fail_at("hidden", "expected integer widths, got " + h.dump());
      c.hidden.push_back(w.get<int>());
    }
  }
  if (r.has("activation")) c.activation = r.string("activation");
  if (r.has("epochs")) c.epochs = r.number("epochs");
  if (r.has("batch_size")) c.batch_size = r.number("batch_size");
  if (r.has("sampling")) c.sampling = r.string("sampling");
  if (r.has("lr")) c.lr = r.number("lr");
  if (r.has("momentum")) c.momentum = r.number("momentum");
  if (r.has("weight_decay")) c.weight_decay = r.number("weight_decay");
  if (r.has("lr_schedule")) c.lr_schedule = r.string("lr_schedule");
  if (r.has("ema_decay")) c.ema_decay = r.number("ema_decay");
  if (r.has("dp")) c.dp = r.boolean("dp");
  if (r.has("clip_norm")) c.clip_norm = r.number("clip_norm");
  if (r.has("noise_multiplier")) c.noise_multiplier = r.number("noise_multiplier");
  if (r.has("target_epsilon")) c.target_epsilon = r.number("target_epsilon");
  if (r.has("delta")) c.delta = r.number("delta");
  if (r.has("seed")) {
    const long long s = r.integer("seed");
    if (s < 0) r.fail_at("seed", "must be non-negative");
    c.seed = static_cast<std::uint64_t>(s);
  }
  if (r.has("noise_seed")) {
    const long long s = r.integer("noise_seed");
    if (s < 0) r.fail_at("noise_seed", "must be non-negative");
    c.noise_seed = static_cast<std::uint64_t>(s);
  }
  if (r.has("threads")) c.threads = static_cast<int>(r.integer("threads"));
  if (r.has("metrics")) c.metrics = r.string("metrics");
  if (r.has("algo")) c.algo = r.string("algo");
  if (r.has("noise_mode")) c.noise_mode = r.string("noise_mode");
  if (r.has("timeout_s")) c.timeout_s = r.number("timeout_s");
  if (r.has("topology")) c.topology = r.string("topology");
  if (r.has("topology_weights")) c.topology_weights = r.string("topology_weights");
  if (r.has("topology_degree")) c.topology_degree = static_cast<int>(r.integer("topology_degree"));
  if (r.has("topology_seed")) {
    const long long s = r.integer("topology_seed");
    if (s < 0) r.fail_at("topology_seed", "must be non-negative");
    c.topology_seed = static_cast<std::uint64_t>(s);
  }
  if (r.has("topology_schedule")) c.topology_schedule = r.string("topology_schedule");
  if (r.has("init")) c.init = r.string("init");
  if (r.has("metrics_every")) c.metrics_every = static_cast<int>(r.integer("metrics_every"));
  if (r.has("metrics_eval_rows")) {
    c.metrics_eval_rows = static_cast<int>(r.integer("metrics_eval_rows"));
  }
  if (r.has("run_name")) c.run_name = r.string("run_name");
  try {
    validate(c);
  } catch (const Error& e) {
    fail(e.code(), where + e.what());
  }
  return c;
}

Json to_json(const TrainConfig& c) {
  return {{"data", c.data},         {"hidden", c.hidden},
          {"activation", c.activation}, {"epochs", c.epochs},
          {"batch_size", c.batch_size}, {"sampling", c.sampling},
          {"lr", c.lr},             {"momentum", c.momentum},
          {"weight_decay", c.weight_decay}, {"lr_schedule", c.lr_schedule},
          {"ema_decay", c.ema_decay}, {"dp", c.dp},
          {"clip_norm", c.clip_norm}, {"noise_multiplier", c.noise_multiplier},
          {"target_epsilon", c.target_epsilon}, {"delta", c.delta},
          {"seed", c.seed},         {"noise_seed", c.noise_seed},
          {"threads", c.threads},
          {"metrics", c.metrics},   {"algo", c.algo},
          {"noise_mode", c.noise_mode}, {"timeout_s", c.timeout_s},
          {"topology", c.topology}, {"topology_weights", c.topology_weights},
          {"topology_degree", c.topology_degree}, {"topology_seed", c.topology_seed},
          {"topology_schedule", c.topology_schedule}, {"init", c.init},
          {"metrics_every", c.metrics_every}, {"metrics_eval_rows", c.metrics_eval_rows},
          {"run_name", c.run_name}};
}

std::uint64_t shared_settings_hash(const TrainConfig& c) {
  Json j = to_json(c);
  for (const char* key : {"data", "threads", "metrics", "noise_seed", "run_name"}) j.erase(key);
  return fnv1a64(j.dump());  // the canonical dump: keys sorted
}

namespace {
void require(bool ok, const std::string& field, const std::string& what) {
  if (!ok) fail(Code::invalid_argument, "/" + field + ": " + what);
}
}  // namespace

void validate(const TrainConfig& c) {
  for (int w : c.hidden) require(w > 0, "hidden", "widths must be positive");
  require(c.activation == "relu" || c.activation == "tanh", "activation",
          "expected relu or tanh, got \"" + c.activation + "\"");
  require(c.epochs > 0, "epochs", "must be positive");
  require(c.batch_size >= 1, "batch_size", "must be at least 1");
  require(c.sampling == "poisson" || c.sampling == "shuffle", "sampling",
          "expected poisson or shuffle, got \"" + c.sampling + "\"");
  require(c.lr >= 0, "lr", "must be non-negative");
  require(c.momentum >= 0 && c.momentum < 1, "momentum", "must be in [0, 1)");
  require(c.weight_decay >= 0, "weight_decay", "must be non-negative");
  require(c.lr_schedule == "constant" || c.lr_schedule == "cosine", "lr_schedule",
          "expected constant or cosine, got \"" + c.lr_schedule + "\"");
  require(c.ema_decay >= 0 && c.ema_decay < 1, "ema_decay", "must be in [0, 1)");
  require(c.clip_norm > 0, "clip_norm", "must be positive");
  require(c.noise_multiplier >= 0, "noise_multiplier", "must be non-negative");
  require(!c.dp || c.noise_multiplier > 0 || c.target_epsilon > 0, "target_epsilon",
          "must be positive when noise_multiplier is not given");
  require(c.delta > 0 && c.delta < 1, "delta", "must be in (0, 1)");
  require(c.threads >= 1 && c.threads <= 256, "threads", "must be in [1, 256]");
  require(c.algo == "single" || c.algo == "allreduce" || c.algo == "gossip" ||
              c.algo == "local-sgd",
          "algo", "expected single, allreduce, gossip or local-sgd, got \"" + c.algo + "\"");
  require(c.local_steps >= 1, "local_steps", "must be at least 1");
  require(c.bucket_bytes >= 0, "bucket_bytes", "must be non-negative (0: no buckets)");
  require(!c.topology.empty(), "topology", "must name a kind or a .json graph file");
  require(c.topology_weights == "metropolis" || c.topology_weights == "uniform" ||
              c.topology_weights == "lazy",
          "topology_weights",
          "expected metropolis, uniform or lazy, got \"" + c.topology_weights + "\"");
  require(c.topology_degree >= 0, "topology_degree", "must be non-negative");
  require(c.init == "same" || c.init == "independent", "init",
          "expected same or independent, got \"" + c.init + "\"");
  require(c.metrics_every >= 0, "metrics_every", "must be non-negative (0: off)");
  require(c.metrics_eval_rows >= 0, "metrics_eval_rows", "must be non-negative (0: none)");
  require(c.noise_mode == "distributed" || c.noise_mode == "local", "noise_mode",
          "expected distributed or local, got \"" + c.noise_mode + "\"");
  require(c.timeout_s > 0, "timeout_s", "must be positive");
}

}  // namespace dpg
