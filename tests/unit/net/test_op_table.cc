// The wait every transport shares (runtime/net/op_table.h): a completion ends its own waiter's
// wait, and a background thread's wait (BackgroundWaits) does not count as this peer waiting.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/net/op_table.h"
#include "runtime/net/transport.h"

using dpg::net::BackgroundWaits;
using dpg::net::Handle;
using dpg::net::OpKind;
using dpg::net::OpTable;
using dpg::net::Tag;
using namespace std::chrono_literals;

namespace {

// Polls `ok` for up to 2 s.
template <class F>
bool eventually(F ok) {
  for (int i = 0; i < 2000; ++i) {
    if (ok()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return ok();
}

}  // namespace

TEST_CASE("OpTable: a background thread's wait is not the peer waiting; each completion ends its own wait") {
  OpTable table(0, std::chrono::milliseconds(20000), /*spin_us=*/0);
  const Handle quiet = table.post(OpKind::recv, 1, Tag{1, 0, 0}, nullptr, 0);
  const Handle loud = table.post(OpKind::recv, 1, Tag{1, 1, 0}, nullptr, 0);
  std::atomic<bool> quiet_done{false}, loud_done{false};
  std::thread background([&] {
    const BackgroundWaits mark;
    table.wait(quiet);
    quiet_done = true;
  });
  std::this_thread::sleep_for(50ms);  // inside its wait by now
  CHECK_FALSE(table.waiting());
  std::thread training([&] {
    table.wait(loud);
    loud_done = true;
  });
  CHECK(eventually([&] { return table.waiting(); }));
  // Completing one wakes its waiter, and not the other.
  table.complete(loud.slot);
  CHECK(eventually([&] { return loud_done.load(); }));
  CHECK_FALSE(quiet_done);
  CHECK(eventually([&] { return !table.waiting(); }));
  table.complete(quiet.slot);
  background.join();
  training.join();
  CHECK(quiet_done);
}
