#include "runtime/train/run_state.h"

#include <algorithm>
#include <cmath>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/core/os_random.h"

namespace dpg::train {
namespace {

std::string show(const Json& v) { return v.is_null() ? "(none)" : shorten(v.dump()); }

}  // namespace

std::uint64_t secret_seed() {
  return os_random_u64("the secret noise seed") | 1;
}

model::MlpSpec spec_for(const TrainConfig& c, const data::Dataset& d) {
  model::MlpSpec s;
  s.inputs = static_cast<int>(d.cols);
  s.hidden = c.hidden;
  s.classes = d.num_classes;
  s.activation = c.activation;
  return s;
}

double pass_row_bytes(const model::MlpSpec& spec) {
  // The workspace grows to an eighth over the rows it is asked for (mlp.cc); the clipping keeps
  // a norm and a factor a row, and the trainer a label.
  return static_cast<double>(model::Workspace::row_bytes(spec)) * 9.0 / 8.0 +
         2 * sizeof(float) + sizeof(std::int32_t);
}

std::size_t physical_rows(const TrainConfig& c, const model::MlpSpec& spec) {
  auto rows = static_cast<std::size_t>(c.physical_batch);
  if (c.batch_memory_mib > 0) {
    const auto fit =
        static_cast<std::size_t>(c.batch_memory_mib * 1048576.0 / pass_row_bytes(spec));
    rows = rows == 0 ? fit : std::min(rows, fit);
  }
  return rows;
}

RunState::RunState(const TrainConfig& c, const data::Dataset& train, const dp::PrivacyPlan& plan,
                   int rank)
    : spec(spec_for(c, train)),
      model(spec, c.init == Init::independent ? c.seed + static_cast<std::uint64_t>(rank) : c.seed),
      released(spec, c.seed),
      noise_seed(c.noise_seed != 0 ? c.noise_seed : secret_seed()),
      mechanism(model.num_params(),
                {.enabled = c.dp,
                 .clip_norm = static_cast<float>(c.clip_norm),
                 .noise_multiplier = plan.peer_sigma,
                 .expected_batch = plan.peer_batch[static_cast<std::size_t>(rank)],
                 .secure_noise = c.secure_noise,
                 .widest_layer = model.widest(),
                 .noise_threads = std::min(c.threads, 64),
                 .secure_aggregation = plan.secure_aggregation,
                 .grid_scale = plan.secagg.grid_scale,
                 .skellam_mu = plan.secagg.peer_mu},
                noise_seed, static_cast<std::uint64_t>(rank)),
      sgd(model.num_params(), {.lr = c.lr, .momentum = c.momentum, .weight_decay = c.weight_decay}),
      accountant(plan.new_account()),
      message_accountant(plan.new_account()),
      pass_rows(physical_rows(c, spec)) {
  rates.push_back({0, plan.peer_q});
  const double q = plan.peer_q[static_cast<std::size_t>(rank)];
  const Rng rng(noise_seed, stream_for(stream::kSampler, static_cast<std::uint64_t>(rank)));
  if (c.sampling == Sampling::poisson) {
    poisson.emplace(train.rows, q, rng);
  } else {
    // This peer's share of the global batch, so that all peers together take batch_size.
    shuffle.emplace(train.rows, static_cast<std::size_t>(std::max(1.0, std::round(q * train.rows))),
                    rng);
  }
}

Checkpoint save_run_state(const RunState& s, const Progress& p, const RunIdentity& id) {
  const TrainConfig& c = id.config;
  Checkpoint out;
  Json& m = out.meta;
  m["format"] = "dpgossip checkpoint";
  m["step"] = p.step;
  m["rank"] = id.rank;
  m["world"] = id.world;
  m["run_id"] = id.run_id;
  m["training"] = training_settings(c);
  m["training_hash"] = training_settings_hash(c);
  m["noise_seed_fixed"] = c.noise_seed != 0;
  if (c.noise_seed != 0) m["noise_seed"] = c.noise_seed;
  m["threads"] = c.threads;
  m["plan"] = {{"q", id.plan.q},
               {"steps", id.plan.steps},
               {"model_sigma", id.plan.model_sigma},
               {"message_sigma", id.plan.message_sigma}};
  m["shard_rows"] = id.shard_rows;
  m["accountant"] = s.accountant.to_json();
  m["message_accountant"] = s.message_accountant.to_json();
  // Counts over this peer's private batches (examples seen and classified correctly, the loss
  // summed, examples dropped and batches skipped) are un-noised values of its data: the file
  // keeps only those the run reports (--report-train-metrics, --report-dropped), 0 for the
  // others, and says which (docs/PRIVACY.md).
  const bool train = c.report_train_metrics, dropped = c.report_dropped;
  const auto kept = [](bool keep, auto v) { return keep ? v : decltype(v){}; };
  m["progress"] = {{"seen", kept(train, p.seen)},
                   {"correct", kept(train, p.correct)},
                   {"dropped", kept(dropped, p.dropped)},
                   {"epoch_dropped_before", kept(dropped, p.epoch_dropped_before)},
                   {"skipped", kept(dropped, p.skipped)},
                   {"epoch_skipped_before", kept(dropped, p.epoch_skipped_before)},
                   {"samples", p.samples},
                   {"train_metrics_kept", train},
                   {"dropped_kept", dropped}};
  const double seconds[] = {kept(train, p.loss_sum), p.train_seconds, p.wall_seconds};
  out.put("progress", std::span<const double>(seconds));
  out.put("model", s.model.params());
  m["sgd_started"] = s.sgd.started();
  out.put("momentum", s.sgd.momentum_buffer());
  if (s.ema) out.put("ema", s.ema->values());
  // The generators only when the seed is fixed: a secret seed's state would let whoever reads
  // the file recompute the noise and the batches of every step, so a resumed run draws anew.
  if (c.noise_seed != 0) {
    m["noise_rng"] = rng_to_json(s.mechanism.rng_state());
    if (s.poisson) {
      m["sampler_rng"] = rng_to_json(s.poisson->rng_state());
    } else {
      m["sampler_rng"] = rng_to_json(s.shuffle->rng_state());
      m["shuffle_position"] = s.shuffle->position();
      const auto order = s.shuffle->order();
      const std::vector<std::uint64_t> wide(order.begin(), order.end());
      out.put("shuffle_order", std::span<const std::uint64_t>(wide));
    }
  }
  return out;
}

std::string settings_difference(const Json& theirs, const TrainConfig& c) {
  std::string diff;
  const Json mine = training_settings(c);  // kept alive: items() refers to it
  for (const auto& [key, value] : mine.items()) {
    const Json other = theirs.is_object() && theirs.contains(key) ? theirs[key] : Json();
    if (other != value) {
      diff += (diff.empty() ? "" : ", ") + ("/" + key) + " was " + show(other) + ", is " +
              show(value);
    }
  }
  return diff.empty() ? "the settings' hash differs" : diff;
}

void check_same_run(const Checkpoint& ck, const RunIdentity& id) {
  const TrainConfig& c = id.config;
  const Json& m = ck.meta;
  const std::string& f = ck.where;
  auto refuse = [&](const std::string& what) {
    fail(Code::invalid_argument, f + ": " + what + "; a resumed run must be the run that wrote it");
  };
  if (m.value("run_id", std::string()) != id.run_id) {
    refuse("written by another run (run id " + show(m.value("run_id", Json(""))) + "; this "
           "folder's ledger and the other peers' are run " + quote(id.run_id) + ")");
  }
  if (m.value("world", -1) != id.world) {
    refuse("written by a run of " + show(m.value("world", Json())) + " peers, this run has " +
           std::to_string(id.world));
  }
  if (m.value("training_hash", Json()) != Json(training_settings_hash(c))) {
    refuse("written under another configuration (" +
           settings_difference(m.value("training", Json::object()), c) + ")");
  }
  const bool fixed = m.value("noise_seed_fixed", false);
  if (fixed != (c.noise_seed != 0) ||
      (fixed && m.value("noise_seed", Json()) != Json(c.noise_seed))) {
    refuse(fixed ? "/noise_seed: written with a fixed noise seed, this run has another"
                 : "/noise_seed: written with a secret noise seed (0), this run fixes one");
  }
  const Json plan = {{"q", id.plan.q},
                     {"steps", id.plan.steps},
                     {"model_sigma", id.plan.model_sigma},
                     {"message_sigma", id.plan.message_sigma}};
  if (m.value("plan", Json()) != plan) {
    refuse("written under another privacy plan (" + show(m.value("plan", Json())) + ", now " +
           quote(plan) + "): did the data or the peers' shards change?");
  }
  if (m.value("shard_rows", Json()) != Json(id.shard_rows)) {
    refuse("written for a shard of " + show(m.value("shard_rows", Json())) + " rows, /data has " +
           std::to_string(id.shard_rows) + " for rank " + std::to_string(id.rank));
  }
}

Progress restore_run_state(RunState& s, const Checkpoint& ck, const RunIdentity& id) {
  const Json& m = ck.meta;
  JsonReader r(m, ck.where + ": ");
  Progress p;
  p.step = r.integer("step");
  JsonReader pr(r.at("progress"), r.path("progress"));
  p.seen = pr.integer("seen");
  p.correct = pr.integer("correct");
  p.dropped = pr.integer("dropped");
  p.epoch_dropped_before = pr.integer("epoch_dropped_before");
  p.skipped = pr.integer("skipped");
  p.epoch_skipped_before = pr.integer("epoch_skipped_before");
  p.samples = pr.integer("samples");
  // A count the run before did not report was not kept (save_run_state): reported now, it
  // covers the steps from this checkpoint on, which the operator is told.
  const auto warn_unkept = [&](const char* key, bool wanted, const char* what) {
    if (wanted && !(pr.has(key) && pr.boolean(key))) {
      DPG_WARN("resume: " << ck.where << " kept no " << what << " (the run before did not report "
               "them): from step " << p.step << " on only");
    }
  };
  warn_unkept("train_metrics_kept", id.config.report_train_metrics,
              "training loss and accuracy counts; --report-train-metrics reports the current "
              "epoch's");
  warn_unkept("dropped_kept", id.config.report_dropped,
              "counts of dropped examples and skipped batches; --report-dropped reports the run's");
  double seconds[3];
  ck.get("progress", std::span<double>(seconds));
  p.loss_sum = seconds[0];
  p.train_seconds = seconds[1];
  p.wall_seconds = seconds[2];
  if (p.step < 0 || p.step >= id.plan.steps) {
    fail(Code::data_loss, ck.where + ": step " + std::to_string(p.step) + " is not one before "
                                     "the run's last (" + std::to_string(id.plan.steps) + ")");
  }
  ck.get("model", s.model.params());
  std::vector<float> velocity(s.sgd.momentum_buffer().size());
  ck.get("momentum", std::span<float>(velocity));
  s.sgd.restore(velocity, r.boolean("sgd_started"));
  if (s.ema) ck.get("ema", s.ema->values());
  s.accountant = dp::Accountant::from_json(r.at("accountant"), r.path("accountant"));
  s.message_accountant =
      dp::Accountant::from_json(r.at("message_accountant"), r.path("message_accountant"));
  for (const auto& [acc, name] : {std::pair{&s.accountant, "accountant"},
                                  std::pair{&s.message_accountant, "message_accountant"}}) {
    if (acc->is_skellam() != (id.plan.dp && id.plan.secure_aggregation)) {
      fail(Code::data_loss, r.path(name) + ": a " +
                                (acc->is_skellam() ? "poisson_skellam" : "poisson_gaussian") +
                                " account, but this run's noise is " +
                                (id.plan.secure_aggregation ? "Skellam" : "Gaussian"));
    }
  }
  if (id.config.noise_seed != 0) {
    s.mechanism.set_rng_state(rng_from_json(r.at("noise_rng"), r.path("noise_rng")));
    const Rng::State sampler = rng_from_json(r.at("sampler_rng"), r.path("sampler_rng"));
    if (s.poisson) {
      s.poisson->set_rng_state(sampler);
    } else {
      std::vector<std::uint64_t> wide(ck.count<std::uint64_t>("shuffle_order"));
      ck.get("shuffle_order", std::span<std::uint64_t>(wide));
      const std::vector<std::size_t> order(wide.begin(), wide.end());
      const long long pos = r.integer("shuffle_position");
      if (pos < 0) r.fail_at("shuffle_position", "must be non-negative");
      s.shuffle->restore(sampler, order, static_cast<std::size_t>(pos));
    }
  }
  return p;
}

}  // namespace dpg::train
