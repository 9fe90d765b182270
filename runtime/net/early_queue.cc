#include "runtime/net/early_queue.h"

#include <cstring>

namespace dpg::net {

EarlyQueue::Iter EarlyQueue::add(Tag tag, std::size_t size) {
  Entry e;
  e.tag = tag;
  e.size = size;
  e.bytes = std::make_unique<std::byte[]>(size > 0 ? size : 1);
  bytes_ += size;
  entries_.push_back(std::move(e));
  return std::prev(entries_.end());
}

EarlyQueue::Iter EarlyQueue::find(const Tag& tag) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->tag == tag) return it;
  }
  return entries_.end();
}

std::string EarlyQueue::deliver(Iter it, int peer, std::byte* data, std::size_t size) {
  std::string why;
  if (it->size != size) {
    why = "peer " + std::to_string(peer) + " sent " + std::to_string(it->size) + " bytes for " +
          to_string(it->tag) + " but the receive expects " + std::to_string(size);
  } else if (size > 0) {
    std::memcpy(data, it->bytes.get(), size);
  }
  drop(it);
  return why;
}

void EarlyQueue::drop(Iter it) {
  bytes_ -= it->size;
  entries_.erase(it);
}

std::string EarlyQueue::describe() const {
  std::string out = std::to_string(entries_.size()) + " early messages (" +
                    std::to_string(bytes_) + " of " + std::to_string(limits_.bytes) + " bytes, " +
                    std::to_string(entries_.size()) + " of " + std::to_string(limits_.messages) +
                    " messages)";
  std::size_t shown = 0;
  for (const Entry& e : entries_) {
    if (shown == 8) {
      out += ", ...";
      break;
    }
    out += (shown++ == 0 ? ": " : ", ") + to_string(e.tag) + " (" + std::to_string(e.size) +
           " bytes)";
  }
  return out;
}

std::string held_back(int peer, const Tag& parked, std::size_t parked_size,
                      const EarlyQueue& queue) {
  return "peer " + std::to_string(peer) + "'s next message (" + to_string(parked) + ", " +
         std::to_string(parked_size) + " bytes) waits for a receive not posted here and holds " +
         "back every later one from it: it does not fit the early queue, which holds " +
         queue.describe();
}

}  // namespace dpg::net
