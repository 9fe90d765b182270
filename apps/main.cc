#include <exception>
#include <iostream>

#include "apps/commands.h"
#include "runtime/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"dpgossip: decentralized, differentially private training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "dpgossip 0.1.0");
  dpg::app::add_prepare(app);
  dpg::app::add_privacy(app);
  dpg::app::add_topology(app);
  dpg::app::add_train(app);
  dpg::app::add_bench(app);
  dpg::app::add_launch(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const dpg::Error& e) {
    std::cerr << "dpgossip: error (" << dpg::code_name(e.code()) << "): " << e.what() << "\n";
    return e.code() == dpg::Code::invalid_argument || e.code() == dpg::Code::not_found ? 2 : 1;
  } catch (const std::exception& e) {
    std::cerr << "dpgossip: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
