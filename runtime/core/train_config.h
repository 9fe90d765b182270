// The training configuration: one JSON file becomes this validated struct; every field can be
// overridden on the command line. Defaults are the documented DP-SGD recipe (docs/RECIPE.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/json_io.h"

namespace dpg {

struct TrainConfig {
  std::string data = "data/fashion-mnist";  // folder written by `dpgossip prepare`
  std::vector<int> hidden = {256};           // hidden layer widths
  std::string activation = "tanh";           // relu | tanh
  double epochs = 40;
  double batch_size = 4096;                  // expected batch size (q * n under Poisson sampling)
  std::string sampling = "poisson";          // poisson | shuffle (fixed-size shuffled batches)
  double lr = 1.0;
  double momentum = 0.9;
  double weight_decay = 0.0;
  std::string lr_schedule = "constant";      // constant | cosine
  double ema_decay = 0.995;                  // 0: off; else average of the iterates
  bool dp = true;                            // false: plain SGD, no clipping, no noise
  double clip_norm = 1.0;
  double noise_multiplier = 0.0;             // 0: calibrate to target_epsilon
  double target_epsilon = 3.0;
  double delta = 1e-5;
  std::uint64_t seed = 0;                    // initialisation
  // Seeds the Poisson sampler and the noise. 0 (default): drawn from the OS at start and never
  // printed, because the guarantee needs the noise and the batch membership to be secret. Set it
  // only for reproducible experiments, knowing that whoever knows it can subtract the noise.
  std::uint64_t noise_seed = 0;
  int threads = 2;                           // BLAS threads
  // single: one process. allreduce: synchronous data-parallel DP-SGD over a ring all-reduce of
  // every peer in the hosts file. gossip: D-PSGD, each peer mixing its model with its neighbours'
  // in `topology` (docs/GOSSIP.md).
  // local-sgd: each peer takes local_steps DP steps on its own model, then the replicas are
  // averaged by an all-reduce.
  std::string algo = "single";
  int local_steps = 4;          // local-sgd: local steps between two averages (H)
  long long bucket_bytes = 0;   // allreduce: bucket size overlapping the backward pass (0: off)
  // allreduce only. distributed: each of N peers adds N(0, sigma^2 C^2 / N), so the sum carries
  // the central noise. local: each peer adds N(0, sigma^2 C^2), so every message is itself DP.
  std::string noise_mode = "distributed";
  // gossip only. A kind (ring, torus, hypercube, exponential, symmetric-exponential,
  // one-peer-exponential, complete, star, random-regular) or a JSON graph file (a name ending in
  // .json), with the weight rule, degree and seed of the generators (docs/TOPOLOGY.md).
  std::string topology = "ring";
  std::string topology_weights = "metropolis";  // metropolis | uniform | lazy
  int topology_degree = 0;                      // random-regular: d (0: the generator's default)
  std::uint64_t topology_seed = 0;              // random-regular
  // gossip only. Later graphs: "epoch:5=exponential,step:300=ring" switches every peer to the
  // named graph at that epoch (or step) boundary. "" keeps `topology` for the whole run.
  std::string topology_schedule;
  // gossip only. same: every peer starts from rank 0's initial model (D-PSGD's x_0). independent:
  // each peer initialises with seed + rank, to watch disagreement decay (with lr 0, plain gossip).
  std::string init = "same";
  int metrics_every = 5;                        // gossip: consensus distance every K steps (0: off)
  // gossip: the K-step metrics also evaluate each peer's model and the peers' mean on the first
  // this many test rows (0: the consensus distance only; every epoch uses the whole split).
  int metrics_eval_rows = 1000;
  std::string run_name;                         // the "run" of every metrics line ("": generated)
  double timeout_s = 60;                     // every network wait, and the connection set-up
  std::string metrics = "runs/metrics.jsonl";  // JSON-lines file, appended ("" = none)
};

// Reads a config object; errors name `where` and the JSON path ("cfg.json: /lr: ...").
TrainConfig train_config_from_json(const Json& j, const std::string& where);
Json to_json(const TrainConfig& c);
// A hash of the settings every peer of one run must share (everything except the data folder,
// the thread count, the metrics file and the secret noise seed), for the handshake.
std::uint64_t shared_settings_hash(const TrainConfig& c);
// Checks ranges; errors name the field.
void validate(const TrainConfig& c);

}  // namespace dpg
