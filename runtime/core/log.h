// Minimal leveled logging to stderr. The level is set once by main; DPG_LOG is the environment
// switch for diagnostics (error, warn, info, debug).
// Every line says who speaks, in one prefix: "[info] node7 pid 4242 rank 3: train: ...". The
// host and rank come from set_origin() (main, once the rank is known); a thread that acts for one rank
// of several in this process (tests, the in-process transport) says so with a RankScope, which
// overrides the process's rank on that thread. Log sites never write a rank themselves.
#pragma once

#include <sstream>
#include <string>

namespace dpg::log {

enum class Level { error = 0, warn = 1, info = 2, debug = 3 };

void set_level(Level level);
Level level();
void write(Level level, const std::string& line);

// This process's rank (-1: none yet), for the prefix of every later line, with this machine's
// name (gethostname(2)).
void set_origin(int rank);
// The rank this thread acts for, while it lives (restores the previous one).
class RankScope {
 public:
  explicit RankScope(int rank);
  ~RankScope();
  RankScope(const RankScope&) = delete;
  RankScope& operator=(const RankScope&) = delete;

 private:
  int previous_;
};
// The prefix of a line written now on this thread: "host pid P rank R: ", parts unknown left out.
std::string origin();

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
