#include "runtime/net/shm/shm_ring.h"

#include <cstring>
#include <new>

namespace dpg::net::shm {

std::size_t mapping_bytes(uint32_t slot_bytes, uint32_t slots) {
  return kHeaderRegionBytes + 2 * static_cast<std::size_t>(slot_bytes) * slots;
}

std::string check_sizes(uint32_t slot_bytes, uint32_t slots) {
  if (slot_bytes < 2 * kSlotHeaderBytes || slot_bytes > (16u << 20) || slot_bytes % 64 != 0) {
    return "slot_bytes " + std::to_string(slot_bytes) +
           " is not a multiple of 64 between 128 and 16 MiB";
  }
  if (slots < 2 || slots > 65536) {
    return "slots " + std::to_string(slots) + " is not between 2 and 65536";
  }
  if (mapping_bytes(slot_bytes, slots) > (std::size_t{4} << 30)) {
    return std::to_string(slots) + " slots of " + std::to_string(slot_bytes) +
           " bytes make a mapping above 4 GiB per pair";
  }
  return "";
}

std::optional<uint64_t> Ring::free_slots(std::string& why) const {
  const uint64_t tail = state_->tail.load(std::memory_order_acquire);
  if (tail > written_ || written_ - tail > count_) {
    why = "the ring's tail " + std::to_string(tail) + " is outside [head - " +
          std::to_string(count_) + ", head] with head " + std::to_string(written_);
    return std::nullopt;
  }
  return count_ - (written_ - tail);
}

void Ring::publish(uint64_t n) {
  written_ += n;
  state_->head.store(written_, std::memory_order_release);
}

std::optional<uint64_t> Ring::ready(std::string& why) const {
  const uint64_t head = state_->head.load(std::memory_order_acquire);
  if (head < read_ || head - read_ > count_) {
    why = "the ring's head " + std::to_string(head) + " is outside [tail, tail + " +
          std::to_string(count_) + "] with tail " + std::to_string(read_);
    return std::nullopt;
  }
  return head - read_;
}

void Ring::release(uint64_t n) {
  read_ += n;
  state_->tail.store(read_, std::memory_order_release);
}

void init_pair(void* base, uint32_t slot_bytes, uint32_t slots) {
  auto* h = new (base) PairHeader();
  h->magic = kPairMagic;
  h->version = kPairVersion;
  h->slot_bytes = slot_bytes;
  h->slots = slots;
}

std::string check_pair(const void* base, std::size_t bytes, uint32_t slot_bytes, uint32_t slots) {
  if (bytes != mapping_bytes(slot_bytes, slots)) {
    return "its mapping has " + std::to_string(bytes) + " bytes, expected " +
           std::to_string(mapping_bytes(slot_bytes, slots));
  }
  uint32_t h[4];  // magic, version, slot_bytes, slots
  std::memcpy(h, base, sizeof h);
  if (h[0] != kPairMagic || h[1] != kPairVersion) {
    return "its mapping is not a dpgossip pair of version " + std::to_string(kPairVersion);
  }
  if (h[2] != slot_bytes || h[3] != slots) {
    return "its rings have " + std::to_string(h[3]) + " slots of " + std::to_string(h[2]) +
           " bytes, this peer's " + std::to_string(slots) + " of " + std::to_string(slot_bytes) +
           " (start every peer with the same settings)";
  }
  return "";
}

PairView view_pair(void* base, int side, uint32_t slot_bytes, uint32_t slots) {
  auto* h = static_cast<PairHeader*>(base);
  auto* at = static_cast<std::byte*>(base) + kHeaderRegionBytes;
  const std::size_t ring_bytes = static_cast<std::size_t>(slot_bytes) * slots;
  PairView v;
  v.header = h;
  v.side = side;
  v.out = Ring(&h->ring[side], at + side * ring_bytes, slot_bytes, slots);
  v.in = Ring(&h->ring[1 - side], at + (1 - side) * ring_bytes, slot_bytes, slots);
  return v;
}

}  // namespace dpg::net::shm
