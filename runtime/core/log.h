// Minimal leveled logging to stderr. The level is set once by main; DPG_LOG is the environment
// switch for diagnostics (error, warn, info, debug).
#pragma once

#include <sstream>
#include <string>

namespace dpg::log {

enum class Level { error = 0, warn = 1, info = 2, debug = 3 };

void set_level(Level level);
Level level();
void write(Level level, const std::string& line);

}  // namespace dpg::log

#define DPG_LOG_AT_(lvl, expr)                                                  \
  do {                                                                          \
    if (static_cast<int>(lvl) <= static_cast<int>(::dpg::log::level())) {      \
      std::ostringstream dpg_log_os_;                                           \
      dpg_log_os_ << expr;                                                      \
      ::dpg::log::write(lvl, dpg_log_os_.str());                                \
    }                                                                           \
  } while (0)

#define DPG_INFO(expr) DPG_LOG_AT_(::dpg::log::Level::info, expr)
#define DPG_WARN(expr) DPG_LOG_AT_(::dpg::log::Level::warn, expr)
#define DPG_DEBUG(expr) DPG_LOG_AT_(::dpg::log::Level::debug, expr)
