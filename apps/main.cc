#include <csignal>
#include <exception>
#include <iostream>
#include <new>
#include <stdexcept>
#include <string>

#include "apps/commands.h"
#include "apps/guards.h"
#include "runtime/core/error.h"

namespace {

// "dpgossip train" (or "dpgossip" before a subcommand was chosen), plus what it was doing.
std::string who(const CLI::App& app) {
  std::string name = "dpgossip";
  for (const CLI::App* sub : app.get_subcommands()) name += " " + sub->get_name();
  const std::string& doing = dpg::app::activity();
  return doing.empty() ? name : name + " (" + doing + ")";
}

}  // namespace

int main(int argc, char** argv) {
  // A file size limit (ulimit -f, RLIMIT_FSIZE) would kill the process mid-write by SIGXFSZ,
  // leaving a torn line or a temporary file; ignored, the write fails with EFBIG and its writer
  // ends the command with an error naming the file, having left nothing half-written.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"dpgossip: decentralized, differentially private training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "dpgossip 0.1.0");
  dpg::app::add_prepare(app);
  dpg::app::add_privacy(app);
  dpg::app::add_topology(app);
  dpg::app::add_train(app);
  dpg::app::add_audit(app);
  dpg::app::add_bench(app);
  dpg::app::add_launch(app);
  dpg::app::add_report(app);
  try {
    app.parse(argc, argv);
    // A summary that never reached its reader is a failed command: flush and check stdout.
    std::cout.flush();
    if (!std::cout) {
      dpg::app::set_activity("");
      dpg::fail(dpg::Code::failed_precondition,
                "writing standard output failed (closed pipe or full disk)");
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const dpg::Error& e) {
    std::cerr << who(app) << ": error (" << dpg::code_name(e.code()) << "): " << e.what() << "\n";
    return e.code() == dpg::Code::invalid_argument || e.code() == dpg::Code::not_found ? 2 : 1;
  } catch (const std::bad_alloc&) {
    std::cerr << who(app)
              << ": error: out of memory (an input or a flag asks for more than this machine "
                 "has; see docs/LIMITS.md)\n";
    return 1;
  } catch (const std::length_error& e) {
    std::cerr << who(app) << ": error: a size out of range (" << e.what()
              << "; an input or a flag asks for more than can be allocated; see docs/LIMITS.md)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << who(app) << ": error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
