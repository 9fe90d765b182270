#include "apps/commands.h"
namespace dpg::app {
void add_privacy(CLI::App& app) { (void)app; }
}  // namespace dpg::app
