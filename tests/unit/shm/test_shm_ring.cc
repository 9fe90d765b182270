// The ring of one pair in this process: empty and full, wrap-around with a consumer thread, and
// a peer's impossible head or tail caught before any slot is used.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "runtime/net/shm/shm_ring.h"

using namespace dpg::net::shm;

namespace {

// A pair's memory, as a mapping would give it (page-aligned, zeroed).
struct Memory {
  explicit Memory(uint32_t slot_bytes, uint32_t slots)
      : bytes(mapping_bytes(slot_bytes, slots)),
        // aligned_alloc takes a whole number of alignments (C11 7.22.3.1).
        base(static_cast<std::byte*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096))) {
    std::memset(base, 0, bytes);
    init_pair(base, slot_bytes, slots);
  }
  ~Memory() { std::free(base); }
  std::size_t bytes;
  std::byte* base;
};

}  // namespace

TEST_CASE("ring: empty, full, and free again once read") {
  Memory m(128, 4);
  REQUIRE(check_pair(m.base, m.bytes, 128, 4) == "");
  PairView a = view_pair(m.base, 0, 128, 4), b = view_pair(m.base, 1, 128, 4);
  std::string why;
  CHECK(*b.in.ready(why) == 0);  // empty
  CHECK(*a.out.free_slots(why) == 4);
  for (int i = 0; i < 4; ++i) {
    a.out.write_slot(0)->chunk = static_cast<uint32_t>(i);
    a.out.publish(1);
  }
  CHECK(*a.out.free_slots(why) == 0);  // full
  CHECK(*b.in.ready(why) == 4);
  CHECK(b.in.read_slot(0)->chunk == 0);
  CHECK(b.in.read_slot(3)->chunk == 3);
  b.in.release(1);
  CHECK(*a.out.free_slots(why) == 1);
  CHECK(*b.in.ready(why) == 3);
  // The other direction is untouched.
  CHECK(*a.in.ready(why) == 0);
  CHECK(*b.out.free_slots(why) == 4);
}

TEST_CASE("ring: wrap-around many times with a consumer thread, every byte checked") {
  constexpr uint32_t kSlots = 3, kSlotBytes = 192;  // 128 payload bytes a slot
  Memory m(kSlotBytes, kSlots);
  PairView a = view_pair(m.base, 0, kSlotBytes, kSlots), b = view_pair(m.base, 1, kSlotBytes, kSlots);
  constexpr uint64_t kCount = 5000;
  std::string failure;
  std::thread consumer([&] {
    std::string why;
    for (uint64_t seq = 0; seq < kCount && failure.empty();) {
      const auto ready = b.in.ready(why);
      if (!ready) {
        failure = why;
        return;
      }
      for (uint64_t i = 0; i < *ready; ++i, ++seq) {
        if (b.in.read_slot(i)->round != seq) failure = "slot out of order at " + std::to_string(seq);
        for (std::size_t k = 0; k < b.in.payload_bytes(); ++k) {
          if (b.in.read_payload(i)[k] != std::byte(static_cast<uint8_t>(seq + k))) {
            failure = "byte " + std::to_string(k) + " of slot " + std::to_string(seq);
          }
        }
      }
      b.in.release(*ready);
    }
  });
  std::string why;
  for (uint64_t seq = 0; seq < kCount;) {
    const auto room = a.out.free_slots(why);
    REQUIRE(room);
    if (*room == 0) {
      std::this_thread::yield();
      continue;
    }
    a.out.write_slot(0)->round = seq;
    for (std::size_t k = 0; k < a.out.payload_bytes(); ++k) {
      a.out.write_payload(0)[k] = std::byte(static_cast<uint8_t>(seq + k));
    }
    a.out.publish(1);
    ++seq;
  }
  consumer.join();
  CHECK_MESSAGE(failure == "", failure);
  CHECK(*a.out.free_slots(why) == kSlots);
}

TEST_CASE("ring: a head or tail no honest peer writes is refused, naming it") {
  Memory m(128, 4);
  PairView a = view_pair(m.base, 0, 128, 4), b = view_pair(m.base, 1, 128, 4);
  std::string why;
  a.out.state().head.store(9);  // 9 slots "written" into a ring of 4
  CHECK_FALSE(b.in.ready(why));
  CHECK(why.find("head 9") != std::string::npos);
  b.out.state().tail.store(3);  // 3 slots "read" of none written
  CHECK_FALSE(b.out.free_slots(why));
  CHECK(why.find("tail 3") != std::string::npos);
}

TEST_CASE("ring: sizes are checked, and a mapping of other sizes is refused") {
  CHECK(check_sizes(64 * 1024, 16) == "");
  CHECK(check_sizes(100, 16) != "");       // not a multiple of 64
  CHECK(check_sizes(64, 16) != "");        // no room for a payload
  CHECK(check_sizes(64 * 1024, 1) != "");  // one slot cannot pipeline
  CHECK(check_sizes(16u << 20, 65536) != "");  // above 4 GiB
  Memory m(128, 4);
  CHECK(check_pair(m.base, mapping_bytes(128, 8), 128, 8).find("4 slots of 128") != std::string::npos);
  CHECK(check_pair(m.base, m.bytes - 64, 128, 4) != "");
  std::memset(m.base, 0, 4);  // the magic
  CHECK(check_pair(m.base, m.bytes, 128, 4).find("not a dpgossip pair") != std::string::npos);
}
