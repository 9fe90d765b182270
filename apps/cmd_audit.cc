// dpgossip audit: a one-run empirical privacy audit (runtime/train/audit_run.h) of one peer's
// DP-SGD run with the train command's settings, its epsilon lower bound printed beside the run's
// own accountant's epsilon. docs/PRIVACY.md, "Empirical audit".
#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/config_flags.h"
#include "apps/guards.h"
#include "runtime/core/error.h"
#include "runtime/core/json_io.h"
#include "runtime/core/log.h"
#include "runtime/core/train_config.h"
#include "runtime/data/dataset.h"
#include "runtime/data/peer_data.h"
#include "runtime/train/audit_run.h"

namespace dpg::app {
namespace {

// The train command's settings that mean something for one audited peer: the model, the
// optimiser, the privacy settings and the data; not the peers, the outputs or checkpoints.
const std::vector<std::string> kAuditKeys = {
    "data",          "hidden",     "activation", "epochs",         "batch_size",
    "lr",            "momentum",   "weight_decay", "lr_schedule",  "ema_decay",
    "dp",            "clip_norm",  "noise_multiplier", "target_epsilon", "delta",
    "accountant",    "seed",       "noise_seed", "secure_noise",   "threads"};

struct AuditFlags {
  ConfigFlags flags;  // the config fields of kAuditKeys
  std::string canary = "gradient";
  long long canaries = 1000;
  std::optional<long long> guesses, k_plus, k_minus;
  double confidence = 0.95;
  long long train_rows = 0;
  bool json = false;
};

TrainConfig audit_config(const CLI::App& cmd, const AuditFlags& f) {
  TrainConfig c;
  c.metrics = "";  // the audit writes no metrics lines
  auto given = [&](const std::string& flag) { return cmd.get_option(flag)->count() > 0; };
  if (given("--noise-multiplier") && given("--target-epsilon")) {
    fail(Code::invalid_argument, "audit: give --noise-multiplier or --target-epsilon, not both");
  }
  std::set<std::string> set;
  apply_config_flags(cmd, f.flags, "audit", c, set);
  if (given("--noise-multiplier") && c.noise_multiplier == 0 && c.dp) {
    fail(Code::invalid_argument,
         "audit: --noise-multiplier 0 calibrates to --target-epsilon; for a run without noise "
         "give --no-dp");
  }
  if (given("--target-epsilon")) c.noise_multiplier = 0;
  try {
    validate(c);
  } catch (const Error& e) {
    fail(e.code(), std::string("audit: configuration ") + e.what());
  }
  return c;
}

train::AuditOptions audit_options(const TrainConfig& c, const AuditFlags& f) {
  train::AuditOptions o;
  o.seed = c.seed;
  o.kind = train::parse_canary_kind(f.canary);
  o.canaries = f.canaries;
  o.confidence = f.confidence;
  if (f.guesses && (f.k_plus || f.k_minus)) {
    fail(Code::invalid_argument, "audit: give --guesses or --k-plus / --k-minus, not both");
  }
  if (f.guesses) {
    if (*f.guesses < 1) {
      fail(Code::invalid_argument, "audit: --guesses must be >= 1, got " +
                                       std::to_string(*f.guesses));
    }
    o.k_plus = (*f.guesses + 1) / 2;
    o.k_minus = *f.guesses / 2;
  } else {
    if (f.k_plus) o.k_plus = *f.k_plus;
    if (f.k_minus) o.k_minus = *f.k_minus;
  }
  return o;
}

data::Prepared audit_data(const TrainConfig& c, long long train_rows) {
  if (!std::filesystem::exists(std::filesystem::path(c.data) / "manifest.json")) {
    DPG_INFO("audit: " << c.data << " has no manifest.json; preparing Fashion-MNIST there first");
    data::PrepareOptions p;
    p.out_dir = c.data;
    data::prepare(p);
  }
  set_activity("loading the data from " + c.data);
  data::Prepared d = data::load_for_peer(c.data, 0, 1, c.seed);
  if (train_rows < 0 || static_cast<std::size_t>(train_rows) > d.train.rows) {
    fail(Code::invalid_argument, "audit: --train-rows must be in [0, " +
                                     std::to_string(d.train.rows) + "] (0: all), got " +
                                     std::to_string(train_rows));
  }
  if (train_rows > 0) {
    d.train.rows = static_cast<std::size_t>(train_rows);
    d.train.features.resize(d.train.rows * d.train.cols);
    d.train.labels.resize(d.train.rows);
  }
  require_train_memory(c, d, 1);
  return d;
}

std::string number(double v) {
  std::ostringstream s;
  s << std::setprecision(6) << v;
  return s.str();
}

void print(const TrainConfig& c, const train::AuditOptions& o, const train::AuditResult& r) {
  const double conf = 100 * o.confidence;
  std::cout << "one-run privacy audit (Steinke, Nasr and Jagielski 2023), " << to_string(o.kind)
            << " canaries\n"
            << "  canaries             " << r.canaries << " (" << r.included << " included)\n"
            << "  guesses              " << r.guesses << " (k+ " << o.k_plus << ", k- "
            << o.k_minus << "), " << r.correct << " correct\n"
            << "  mean score           in " << number(r.mean_score_in) << ", out "
            << number(r.mean_score_out) << "\n"
            << "  epsilon lower bound  " << number(r.epsilon_lower_bound) << "  ("
            << number(conf) << "% confidence, delta " << c.delta << ")\n";
  std::cout << "  accountant epsilon   "
            << (c.dp ? number(r.summary.epsilon) : std::string("inf (no DP)"));
  if (c.dp) {
    std::cout << "  (" << to_string(c.accountant) << "; q " << number(r.sample_rate)
              << ", noise multiplier " << number(r.noise_multiplier) << ", " << r.steps
              << " steps)";
  }
  std::cout << "\n  test accuracy        " << number(100 * r.summary.test_accuracy) << "%\n";
}

Json to_json(const TrainConfig& c, const train::AuditOptions& o, const train::AuditResult& r) {
  Json j;
  j["canary"] = to_string(o.kind);
  j["canaries"] = r.canaries;
  j["included"] = r.included;
  j["k_plus"] = o.k_plus;
  j["k_minus"] = o.k_minus;
  j["guesses"] = r.guesses;
  j["correct"] = r.correct;
  j["confidence"] = o.confidence;
  j["delta"] = c.delta;
  j["epsilon_lower_bound"] = r.epsilon_lower_bound;
  j["epsilon"] = c.dp ? Json(r.summary.epsilon) : Json();  // null: no DP, no upper bound
  j["accountant"] = to_string(c.accountant);
  j["dp"] = c.dp;
  j["sample_rate"] = r.sample_rate;
  j["noise_multiplier"] = r.noise_multiplier;
  j["steps"] = r.steps;
  j["mean_score_in"] = r.mean_score_in;
  j["mean_score_out"] = r.mean_score_out;
  j["test_accuracy"] = r.summary.test_accuracy;
  j["seed"] = c.seed;
  return j;
}

void run_audit_command(const CLI::App& cmd, const AuditFlags& f) {
  set_activity("reading the flags");
  const TrainConfig c = audit_config(cmd, f);
  const train::AuditOptions o = audit_options(c, f);
  train::check_audit(c, o);
  DPG_INFO("audit: " << describe(c));
  const train::AuditResult r = run_audit(c, audit_data(c, f.train_rows), o);
  if (f.json) {
    std::cout << to_json(c, o, r).dump() << std::endl;
  } else {
    print(c, o, r);
  }
}

}  // namespace

void add_audit(CLI::App& app) {
  auto f = std::make_shared<AuditFlags>();
  auto* cmd = app.add_subcommand(
      "audit", "One-run empirical privacy audit: canaries, one training run, an epsilon lower "
               "bound beside the accountant's epsilon (docs/PRIVACY.md)");
  for (const ConfigField& field : config_fields()) {
    if (std::find(kAuditKeys.begin(), kAuditKeys.end(), field.key) == kAuditKeys.end()) continue;
    f->flags.fields.push_back(&field);
  }
  add_config_flags(*cmd, f->flags, [](const ConfigField& field) {
    return field.key == "seed" ? field.help + ", and the auditor's choice of canaries and of "
                                              "which are included"
                               : field.help;
  });
  cmd->add_option("--canary", f->canary,
                  "gradient (white box: Dirac gradients of norm C, scored by the model's "
                  "update along their coordinate) or input (black box: random images with "
                  "random labels, scored by the released model's loss)");
  cmd->add_option("--canaries", f->canaries, "canaries m, each included with probability 1/2");
  cmd->add_option("--guesses", f->guesses,
                  "guesses: the top ceil(K/2) scores guessed in, the bottom floor(K/2) out "
                  "(default 100 + 100)");
  cmd->add_option("--k-plus", f->k_plus, "canaries guessed in (highest scores)");
  cmd->add_option("--k-minus", f->k_minus, "canaries guessed out (lowest scores)");
  cmd->add_option("--confidence", f->confidence, "confidence of the lower bound");
  cmd->add_option("--train-rows", f->train_rows,
                  "train on the first N rows of the training split only (0: all)");
  cmd->add_flag("--json", f->json, "print the result as one JSON object");
  cmd->callback([cmd, f] { run_audit_command(*cmd, *f); });
}

}  // namespace dpg::app
