#include "apps/commands.h"
namespace dpg::app {
void add_prepare(CLI::App& app) { (void)app; }
}  // namespace dpg::app
