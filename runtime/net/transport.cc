#include "runtime/net/transport.h"

namespace dpg::net {

std::string to_string(const Tag& tag) {
  return "op " + std::to_string(tag.op) + " round " + std::to_string(tag.round) + " chunk " +
         std::to_string(tag.chunk);
}

namespace {
thread_local bool t_background = false;
}  // namespace

BackgroundWaits::BackgroundWaits() : was_(t_background) { t_background = true; }
BackgroundWaits::~BackgroundWaits() { t_background = was_; }
bool BackgroundWaits::here() { return t_background; }

}  // namespace dpg::net
