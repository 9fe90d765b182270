// The one place that picks a run's device backends, as transport_setup.h picks its transport:
// the CUDA model on the GPU that --device names (or rank % the GPUs there are), and NCCL's
// collectives on its memory for --transport nccl. Used by `train`.
#pragma once

#include "runtime/core/train_config.h"
#include "runtime/train/run_setup.h"

namespace dpg::app {

// The backends of config `c`: empty factories where the run is on the CPU. The device factory
// fails with unavailable, naming the rank and the device, when the machine has no such GPU.
train::Backends device_backends(const TrainConfig& c);

}  // namespace dpg::app
