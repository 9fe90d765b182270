#include "runtime/net/transport.h"

namespace dpg::net {

std::string to_string(const Tag& tag) {
  return "op " + std::to_string(tag.op) + " round " + std::to_string(tag.round) + " chunk " +
         std::to_string(tag.chunk);
}

}  // namespace dpg::net
