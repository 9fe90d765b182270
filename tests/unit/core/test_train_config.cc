#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>

#include "runtime/core/error.h"
#include "runtime/core/train_config.h"

namespace {

std::string error_of(const dpg::Json& j) {
  try {
    dpg::train_config_from_json(j, "cfg.json:");
  } catch (const dpg::Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Every field away from its default.
dpg::TrainConfig unusual() {
  dpg::TrainConfig c;
  c.data = "elsewhere";
  c.hidden = {64, 32};
  c.activation = dpg::Activation::relu;
  c.epochs = 2.5;
  c.batch_size = 512;
  c.sampling = dpg::Sampling::shuffle;
  c.physical_batch = 100;
  c.batch_memory_mib = 64;
  c.lr = 0.25;
  c.momentum = 0.5;
  c.weight_decay = 1e-4;
  c.lr_schedule = dpg::LrSchedule::cosine;
  c.ema_decay = 0;
  c.dp = false;
  c.clip_norm = 2;
  c.noise_multiplier = 1.1;
  c.target_epsilon = 8;
  c.delta = 1e-6;
  c.seed = 18446744073709551615ull;
  c.noise_seed = 9;
  c.insecure_fixed_seed = true;
  c.secure_noise = true;  // with dp off, beside a noise seed
  c.threads = 3;
  c.device = "cuda:1";  // per peer: each may compute on its own GPU
  c.algo = dpg::Algo::ps_async;
  c.noise_mode = dpg::NoiseMode::local;
  c.topology = "exponential";
  c.topology_weights = dpg::TopologyWeights::lazy;
  c.topology_degree = 3;
  c.topology_seed = 5;
  c.topology_schedule = {{5, true, "ring"}, {300, false, "g.json"}};
  c.init = dpg::Init::independent;
  c.metrics_every = 0;
  c.metrics_eval_rows = 10;
  c.run_name = "r1";
  c.timeout_s = 2.5;
  c.transport = dpg::TransportMode::shm;
  c.metrics = "";
  c.servers = 2;
  c.max_staleness = 0;
  c.local_steps = 8;
  c.group_size = 3;
  c.bucket_bytes = 1 << 20;
  c.hierarchical = true;  // of allreduce and local-sgd: unusual_valid() resets it
  c.balance = dpg::Balance::speed;
  c.balance_every = 2;
  c.balance_rate_cap = 1.5;
  c.trace = "t.json";
  c.accountant = dpg::PrivacyAccountant::rdp;
  c.checkpoint_dir = "ck";
  c.checkpoint_every = 10;
  c.checkpoint_keep = 5;
  c.resume = true;
  c.stop_check_every = 4;
  c.target = dpg::PrivacyTarget::messages;
  c.eval_split = dpg::EvalSplit::validation;
  c.report_dropped = true;
  c.report_train_metrics = true;
  c.secure_aggregation = true;  // checked against the algorithm by the trainer, not here
  return c;
}

}  // namespace

// Whether field f means something to algorithm a (ConfigField::only_for).
bool applies(const dpg::ConfigField& f, dpg::Algo a) {
  return f.only_for.empty() ||
         std::find(f.only_for.begin(), f.only_for.end(), a) != f.only_for.end();
}

// unusual(), with the fields of other algorithms than its own at their defaults (validate()
// refuses them otherwise).
dpg::TrainConfig unusual_valid() {
  const dpg::TrainConfig u = unusual();
  dpg::Json j = dpg::to_json(u);
  const dpg::Json d = dpg::to_json(dpg::TrainConfig{});
  for (const auto& f : dpg::config_fields()) {
    if (!applies(f, u.algo)) j[f.key] = d[f.key];
  }
  return dpg::train_config_from_json(j, "unusual:");
}

TEST_CASE("train config: a non-default config survives to_json and back") {
  const dpg::TrainConfig c = unusual_valid();
  const dpg::Json j = dpg::to_json(c);
  CHECK(j.size() == dpg::config_fields().size());
  CHECK(j["algo"] == "ps-async");
  CHECK(j["noise_mode"] == "local");
  CHECK(j["topology_schedule"] == "epoch:5=ring,step:300=g.json");
  const dpg::TrainConfig back = dpg::train_config_from_json(j, "cfg.json:");
  CHECK(dpg::to_json(back) == j);
  CHECK(back.seed == c.seed);
  CHECK(back.topology_schedule == c.topology_schedule);
  CHECK(back.hidden == c.hidden);
  CHECK(back.algo == dpg::Algo::ps_async);
  // Every field of ps-async differs from its default, so the round trip is a real one.
  const dpg::Json d = dpg::to_json(dpg::TrainConfig{});
  for (const auto& f : dpg::config_fields()) {
    if (applies(f, c.algo)) CHECK_MESSAGE(d[f.key] != j[f.key], f.key);
  }
}

TEST_CASE("train config: a field of some algorithms is refused, not ignored, with the others") {
  const dpg::Json u = dpg::to_json(unusual());
  int seen = 0;
  for (const auto& f : dpg::config_fields()) {
    if (f.only_for.empty()) continue;
    CAPTURE(f.key);
    ++seen;
    for (dpg::Algo a : {dpg::Algo::single, dpg::Algo::allreduce, dpg::Algo::gossip,
                        dpg::Algo::ps_sync, dpg::Algo::ps_async, dpg::Algo::local_sgd,
                        dpg::Algo::ad_psgd, dpg::Algo::partial_allreduce}) {
      CAPTURE(dpg::to_string(a));
      const dpg::Json j = {{"algo", dpg::to_string(a)}, {f.key, u[f.key]}};
      const std::string e = error_of(j);
      if (applies(f, a)) {
        CHECK(e == "");
        CHECK(dpg::to_json(dpg::train_config_from_json(j, "x"))[f.key] == u[f.key]);
      } else {
        CHECK(has(e, "cfg.json:/" + f.key + ": only with algo "));
        CHECK(has(e, "not " + dpg::to_string(a)));
        // Its default is accepted with any algorithm (a config that lists every field).
        CHECK(error_of({{"algo", dpg::to_string(a)},
                        {f.key, dpg::to_json(dpg::TrainConfig{})[f.key]}}) == "");
      }
    }
  }
  CHECK(seen == 9);  // servers, max_staleness, local_steps, group_size, bucket_bytes,
                     // hierarchical, balance, balance_every, balance_rate_cap
}

TEST_CASE("train config: the defaults are the recipe's") {
  const dpg::TrainConfig c = dpg::train_config_from_json(dpg::Json::object(), "cfg.json:");
  CHECK(c.algo == dpg::Algo::single);
  CHECK(c.activation == dpg::Activation::tanh);
  CHECK(c.accountant == dpg::PrivacyAccountant::pld);
  CHECK(c.servers == 1);
  CHECK(c.max_staleness == 4);
  CHECK(c.local_steps == 4);
  CHECK(c.group_size == 2);
  CHECK(c.bucket_bytes == 0);
  CHECK(c.trace.empty());
  CHECK(c.topology_schedule.empty());
  CHECK(has(dpg::describe(c), "algo=single"));
  CHECK(has(dpg::describe(c), " epochs=40 "));
  CHECK(!has(dpg::describe(c), "noise_seed"));  // secret
}

TEST_CASE("train config: an unknown key is rejected by name") {
  CHECK(has(error_of({{"epochs", 2}, {"learning_rate", 0.1}}),
            "cfg.json:/learning_rate: unknown field"));
}

TEST_CASE("train config: a bad enum value names the path and the choices") {
  const std::string e = error_of({{"algo", "gosip"}});
  CHECK(has(e, "cfg.json:/algo: "));
  CHECK(has(e, "single, allreduce, gossip, ps-sync, ps-async, local-sgd, ad-psgd or partial-allreduce"));
  CHECK(has(e, "\"gosip\""));
  CHECK(has(error_of({{"activation", "sigmoid"}}), "cfg.json:/activation: expected relu or tanh"));
  CHECK(has(error_of({{"sampling", 3}}), "cfg.json:/sampling: expected a string"));
  CHECK(has(error_of({{"accountant", "prv"}}), "cfg.json:/accountant: expected pld or rdp"));
  for (const char* a : {"single", "allreduce", "gossip", "ps-sync", "ps-async", "local-sgd",
                        "ad-psgd", "partial-allreduce"}) {
    CHECK(dpg::to_string(dpg::train_config_from_json({{"algo", a}}, "x").algo) == a);
  }
}

TEST_CASE("train config: out-of-range numbers name the field") {
  CHECK(has(error_of({{"lr", -1}}), "cfg.json:/lr: must be non-negative"));
  CHECK(has(error_of({{"delta", 2.0}}), "cfg.json:/delta: must be in (0, 1)"));
  CHECK(has(error_of({{"momentum", 1.0}}), "cfg.json:/momentum: must be in [0, 1)"));
  CHECK(has(error_of({{"threads", 0}}), "cfg.json:/threads: must be in [1, 256]"));
  CHECK(has(error_of({{"servers", 1025}}), "cfg.json:/servers: must be in [1, 1024]"));
  CHECK(has(error_of({{"local_steps", 0}}), "cfg.json:/local_steps"));
  CHECK(has(error_of({{"max_staleness", -1}}), "cfg.json:/max_staleness"));
  CHECK(has(error_of({{"bucket_bytes", 1LL << 41}}), "cfg.json:/bucket_bytes"));
  CHECK(error_of({{"algo", "allreduce"}, {"bucket_bytes", 1LL << 40}}).empty());
  CHECK(has(error_of({{"hidden", {256, -1}}}), "cfg.json:/hidden"));
  CHECK(has(error_of({{"seed", -1}}), "cfg.json:/seed: must be non-negative"));
  CHECK(has(error_of({{"threads", 1.5}}), "cfg.json:/threads: expected an integer"));
  CHECK(has(error_of({{"lr", "fast"}}), "cfg.json:/lr: expected a number"));
  CHECK(has(error_of({{"target_epsilon", 0}, {"noise_multiplier", 0}}), "/target_epsilon"));
  CHECK(error_of({{"target_epsilon", 0}, {"noise_multiplier", 1}}).empty());
  CHECK(error_of({{"target_epsilon", 0}, {"dp", false}}).empty());
}

TEST_CASE("train config: secure noise refuses a fixed noise seed, naming it") {
  CHECK(error_of({{"secure_noise", true}, {"noise_seed", 3}}).find("/noise_seed") !=
        std::string::npos);
  CHECK(error_of({{"secure_noise", true}}).empty());
}

TEST_CASE("train config: the hash ignores exactly the per-peer fields") {
  const std::set<std::string> per_peer = {"data",     "threads", "metrics",
                                          "noise_seed", "run_name", "trace",
                                          "checkpoint_dir", "insecure_fixed_seed",
                                          "report_dropped", "report_train_metrics", "device",
                                          "physical_batch", "batch_memory_mib"};
  // Shared, but free to change when a run is resumed: not in the checkpoint's hash.
  const std::set<std::string> control = {"timeout_s", "checkpoint_every", "checkpoint_keep",
                                         "resume", "stop_check_every", "transport",
                                         "eval_split"};
  dpg::TrainConfig base;
  base.checkpoint_dir = "ck";  // per peer; lets checkpoint_every and resume be set alone
  const dpg::TrainConfig other = unusual();
  const dpg::Json changed = dpg::to_json(other);
  std::set<std::string> ignored, not_trained;
  for (const auto& f : dpg::config_fields()) {
    // The defaults (with an algorithm the field applies to) with this one field from `unusual`.
    dpg::Json j = dpg::to_json(base);
    if (!f.only_for.empty() && f.key != "algo") j["algo"] = dpg::to_string(f.only_for.front());
    const dpg::TrainConfig b = dpg::train_config_from_json(j, "x");
    j[f.key] = changed[f.key];
    const dpg::TrainConfig c = dpg::train_config_from_json(j, "x");
    if (dpg::shared_settings_hash(c) == dpg::shared_settings_hash(b)) ignored.insert(f.key);
    if (dpg::training_settings_hash(c) == dpg::training_settings_hash(b)) {
      not_trained.insert(f.key);
    }
    CHECK(f.shared == !per_peer.count(f.key));
    CHECK(f.run_control == (control.count(f.key) > 0));
  }
  CHECK(ignored == per_peer);
  std::set<std::string> both = per_peer;
  both.insert(control.begin(), control.end());
  CHECK(not_trained == both);
}

TEST_CASE("train config: checkpoint_every and resume need a checkpoint_dir") {
  CHECK(has(error_of({{"checkpoint_every", 5}}), "cfg.json:/checkpoint_every: needs a checkpoint_dir"));
  CHECK(has(error_of({{"resume", true}}), "cfg.json:/resume: needs a checkpoint_dir"));
  CHECK(has(error_of({{"checkpoint_keep", 0}}), "cfg.json:/checkpoint_keep: must be in [1, 1000]"));
  CHECK(has(error_of({{"algo", "allreduce"}, {"hierarchical", true}, {"bucket_bytes", 4096}}),
            "/hierarchical: not with bucket_bytes"));
  CHECK(error_of({{"resume", true}, {"checkpoint_dir", "d"}, {"checkpoint_every", 5}}).empty());
}

TEST_CASE("train config: the topology schedule is parsed when read") {
  const auto s = dpg::parse_topology_schedule("epoch:5=exponential,step:300=ring,epoch:7.5=g.json");
  REQUIRE(s.size() == 3);
  CHECK(s[0] == dpg::ScheduleEntry{5, true, "exponential"});
  CHECK(s[1] == dpg::ScheduleEntry{300, false, "ring"});
  CHECK(s[2] == dpg::ScheduleEntry{7.5, true, "g.json"});
  CHECK(dpg::to_string(s) == "epoch:5=exponential,step:300=ring,epoch:7.5=g.json");
  CHECK(dpg::parse_topology_schedule("").empty());
  const auto c = dpg::train_config_from_json({{"topology_schedule", "epoch:1=ring"}}, "x");
  CHECK(c.topology_schedule.size() == 1);

  CHECK(has(error_of({{"topology_schedule", "epoch:x=ring"}}),
            "cfg.json:/topology_schedule: entry 0 \"epoch:x=ring\": not a number"));
  CHECK(has(error_of({{"topology_schedule", "epoch:1=ring,hour:2=ring"}}),
            "/topology_schedule: entry 1 \"hour:2=ring\": the unit is epoch or step"));
  CHECK(has(error_of({{"topology_schedule", "ring"}}), "entry 0 \"ring\": expected epoch:E=GRAPH"));
  CHECK(has(error_of({{"topology_schedule", "step:0=ring"}}), "must start after the first round"));
  CHECK(has(error_of({{"topology_schedule", "epoch:3=ring,epoch:2=star"}}),
            "entry 1 \"epoch:2=star\": must come after entry 0"));
  CHECK(has(error_of({{"topology_schedule", "epoch:3="}}), "no graph"));
}

TEST_CASE("train config: every table entry has its own key and flag, and parses its own text") {
  std::set<std::string> keys, flags;
  const dpg::TrainConfig u = unusual();
  for (const auto& f : dpg::config_fields()) {
    CHECK_MESSAGE(keys.insert(f.key).second, f.key);
    CHECK_MESSAGE(flags.insert(f.flag).second, f.flag);
    CHECK(f.flag.rfind("--", 0) == 0);
    CHECK(!f.help.empty());
    // The flag's text of a value reads back as the same value.
    dpg::TrainConfig c;
    if (f.show(u) != "\"\"") {
      f.parse(c, f.show(u));
      CHECK_MESSAGE(f.write(c) == f.write(u), f.key);
    }
  }
  CHECK(flags.count("--algo"));
  CHECK(flags.count("--noise-multiplier"));
  CHECK(flags.count("--dp"));
}

TEST_CASE("train config: flag text errors") {
  dpg::TrainConfig c;
  const auto& fields = dpg::config_fields();
  auto by_key = [&](const std::string& k) -> const dpg::ConfigField& {
    for (const auto& f : fields)
      if (f.key == k) return f;
    FAIL("no field " << k);
    return fields.front();
  };
  CHECK_THROWS_WITH_AS(by_key("lr").parse(c, "fast"), doctest::Contains("expected a number"),
                       dpg::Error);
  CHECK_THROWS_WITH_AS(by_key("hidden").parse(c, "256,x"),
                       doctest::Contains("comma-separated integers"), dpg::Error);
  CHECK_THROWS_WITH_AS(by_key("init").parse(c, "random"),
                       doctest::Contains("expected same or independent"), dpg::Error);
  by_key("hidden").parse(c, "256,256");
  CHECK(c.hidden == std::vector<int>{256, 256});
}

TEST_CASE("train config: --no-dp takes the baseline's own defaults for what was not set") {
  dpg::TrainConfig c;
  c.dp = false;
  c.lr = 0.3;  // set by the user
  dpg::apply_no_dp_defaults(c, {"dp", "lr"});
  CHECK(c.lr == 0.3);
  CHECK(c.batch_size == 128);
  CHECK(c.epochs == 15);
  CHECK(c.lr_schedule == dpg::LrSchedule::cosine);
  CHECK(c.hidden == std::vector<int>{256});  // the recipe's model
  // Every key of the table is a config field, and a DP config is left alone.
  for (const auto& [key, value] : dpg::no_dp_defaults().items()) {
    bool found = false;
    for (const auto& f : dpg::config_fields()) found = found || f.key == key;
    CHECK_MESSAGE(found, key);
  }
  dpg::TrainConfig d;
  dpg::apply_no_dp_defaults(d, {});
  CHECK(dpg::to_json(d) == dpg::to_json(dpg::TrainConfig{}));
}
