// The shared memory of one pair of peers and the single-producer single-consumer rings in it.
//
// One mapping (a sealed memfd, created by the higher rank and passed to the lower one) holds two
// rings, one per direction, and a little state per side:
//
//   page 0..3  PairHeader: magic, sizes; per side: its sleeping flag, its heartbeat, its abort
//              text; per ring: head (slots written, by the producer) and tail (slots consumed,
//              by the consumer) and the count of direct reads done (consumer)
//   then       ring 0 (side 0 -> side 1): `slots` slots of `slot_bytes`; then ring 1 (1 -> 0)
//
// A slot is a 64-byte SlotHeader and up to slot_bytes - 64 payload bytes. A message takes one
// slot (kind first) followed by as many `more` slots as its payload needs, or a single `direct`
// slot naming the sender's buffer, which the receiver copies with process_vm_readv. Everything
// read from the mapping is checked before use: the peer may be broken, and nothing here allocates
// or indexes by a number it wrote.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace dpg::net::shm {

inline constexpr uint32_t kPairMagic = 0x52534744;  // "DGSR"
inline constexpr uint32_t kPairVersion = 1;
inline constexpr std::size_t kSlotHeaderBytes = 64;
inline constexpr std::size_t kAbortBytes = 4096;
inline constexpr std::size_t kHeaderRegionBytes = 16384;  // PairHeader, padded to pages

enum class SlotKind : uint32_t { first = 1, more = 2, direct = 3, bye = 4 };

struct SlotHeader {
  uint32_t kind = 0;
  uint32_t op = 0;
  uint64_t round = 0;
  uint32_t chunk = 0;
  uint32_t bytes = 0;    // payload bytes in this slot
  uint64_t length = 0;   // the whole message's length (first, direct)
  uint64_t address = 0;  // direct: where the message lies in the sender
  uint64_t pad[3] = {};
};
static_assert(sizeof(SlotHeader) == kSlotHeaderBytes);

// The state one side writes and the other reads. Each group its own cache line(s).
struct alignas(64) SideState {
  // 1 while this side sleeps in poll(); the other side, having changed anything, swaps it to 0
  // and writes this side's eventfd.
  alignas(64) std::atomic<uint32_t> sleeping{0};
  // steady-clock nanoseconds (CLOCK_MONOTONIC, the same in every process of the host) of this
  // side's last pass over its rings, and whether its training thread is inside a wait then, or
  // this side has failed (its abort is on its way: a peer waiting on it is to hear that, not
  // blame it as busy in the moment between its wait's end and the abort's arrival).
  alignas(64) std::atomic<int64_t> beat_ns{0};
  std::atomic<uint32_t> waiting{0};
  // This side's failure, for the peer to quote: length stored after the text.
  alignas(64) std::atomic<uint32_t> abort_len{0};
  char abort_text[kAbortBytes];
};

struct alignas(64) RingState {
  alignas(64) std::atomic<uint64_t> head{0};    // slots published (producer)
  alignas(64) std::atomic<uint64_t> tail{0};    // slots released (consumer)
  std::atomic<uint64_t> direct_done{0};         // direct messages copied (consumer)
};

struct PairHeader {
  uint32_t magic = 0;
  uint32_t version = 0;
  uint32_t slot_bytes = 0;
  uint32_t slots = 0;
  SideState side[2];
  RingState ring[2];  // ring[s]: written by side s
};
static_assert(sizeof(PairHeader) <= kHeaderRegionBytes);

// Bytes of a pair's mapping with these ring sizes.
std::size_t mapping_bytes(uint32_t slot_bytes, uint32_t slots);
// Empty when the sizes are acceptable, else why not (slot_bytes a multiple of 64 in
// [128, 16 MiB], slots in [2, 65536], the mapping at most 4 GiB).
std::string check_sizes(uint32_t slot_bytes, uint32_t slots);

// One direction of a pair: the ring state and its slots, seen from the producer or the consumer.
class Ring {
 public:
  Ring() = default;
  Ring(RingState* state, std::byte* slots, uint32_t slot_bytes, uint32_t slot_count)
      : state_(state), slots_(slots), slot_bytes_(slot_bytes), count_(slot_count) {}

  std::size_t payload_bytes() const { return slot_bytes_ - kSlotHeaderBytes; }
  uint32_t slot_count() const { return count_; }
  RingState& state() { return *state_; }

  // Producer. Slots free now (the consumer may free more at any time); nullopt when the
  // consumer's tail is impossible (the peer broke the ring): then `why` says how.
  std::optional<uint64_t> free_slots(std::string& why) const;
  // The slot at head + i (i < free_slots()).
  SlotHeader* write_slot(uint64_t i) const { return header_at(written_ + i); }
  std::byte* write_payload(uint64_t i) const { return payload_at(written_ + i); }
  // Makes n more slots visible to the consumer.
  void publish(uint64_t n);

  // Consumer. Slots ready now; nullopt when the producer's head is impossible (the peer broke
  // the ring): then `why` says how.
  std::optional<uint64_t> ready(std::string& why) const;
  const SlotHeader* read_slot(uint64_t i) const { return header_at(read_ + i); }
  const std::byte* read_payload(uint64_t i) const { return payload_at(read_ + i); }
  // Frees n slots for the producer.
  void release(uint64_t n);

 private:
  SlotHeader* header_at(uint64_t seq) const {
    return reinterpret_cast<SlotHeader*>(slots_ + (seq % count_) * slot_bytes_);
  }
  std::byte* payload_at(uint64_t seq) const {
    return slots_ + (seq % count_) * slot_bytes_ + kSlotHeaderBytes;
  }
  RingState* state_ = nullptr;
  std::byte* slots_ = nullptr;
  uint32_t slot_bytes_ = 0;
  uint32_t count_ = 0;
  uint64_t written_ = 0;  // producer's own copy of head
  uint64_t read_ = 0;     // consumer's own copy of tail
};

// A mapped pair: the header and both rings, from one side's point of view (side 0 is the rank
// that created the mapping, the higher one).
struct PairView {
  PairHeader* header = nullptr;
  int side = 0;
  SideState& mine() const { return header->side[side]; }
  SideState& theirs() const { return header->side[1 - side]; }
  Ring out, in;
};

// Lays out a fresh mapping (zeroed) of mapping_bytes(slot_bytes, slots) at `base`.
void init_pair(void* base, uint32_t slot_bytes, uint32_t slots);
// Checks a received mapping's header against the sizes expected; empty when it matches.
std::string check_pair(const void* base, std::size_t bytes, uint32_t slot_bytes, uint32_t slots);
// The view of side `side` of a mapping that passed check_pair with these sizes (or was made by
// init_pair with them); the sizes are this peer's own, never re-read from the shared header.
PairView view_pair(void* base, int side, uint32_t slot_bytes, uint32_t slots);

// Sleep/wake protocol: a side about to sleep sets its flag (seq_cst), looks once more for work
// and then sleeps; a side that changed something in the pair calls wants_wake(), and when it
// returns true writes the sleeper's eventfd. The seq_cst pair makes a lost wake-up impossible.
inline bool wants_wake(SideState& other) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return other.sleeping.load(std::memory_order_relaxed) != 0 &&
         other.sleeping.exchange(0, std::memory_order_acq_rel) != 0;
}

}  // namespace dpg::net::shm
