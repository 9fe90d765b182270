// Each subcommand of the dpgossip CLI: add_X registers its flags and a callback that parses,
// builds the concrete parts and runs. Failures are thrown as dpg::Error and reported by main.
#pragma once

#include <CLI/CLI.hpp>

namespace dpg::app {

void add_prepare(CLI::App& app);
void add_privacy(CLI::App& app);
void add_topology(CLI::App& app);
void add_train(CLI::App& app);
void add_audit(CLI::App& app);
void add_bench(CLI::App& app);
void add_bench_allreduce(CLI::App& bench);  // under bench
void add_bench_link(CLI::App& bench);       // under bench
void add_bench_startup(CLI::App& bench);    // under bench
void add_launch(CLI::App& app);
void add_report(CLI::App& app);

}  // namespace dpg::app
