// Shared by the transports' tests: Transport::poison, the owner giving up with operations posted.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/net/transport.h"

namespace dpg::test {

// Runs body on both peers of a two-peer world of one transport; returns each rank's error ("" when
// it passed).
using RunTwo = std::function<std::vector<std::string>(const std::function<void(net::Transport&)>&)>;

// Rank 0 posts a receive, then poisons its transport; only then does rank 1 send into it. The
// receive's buffer must stay as it was (its owner may have freed it), rank 0's wait must throw the
// poison's message, and, where `peers_hear` (TCP and shared memory tell their peers of a
// failure), rank 1's next receive from rank 0 fails naming that message rather than timing out.
inline void check_poison(const RunTwo& run_two, bool peers_hear) {
  using namespace std::chrono_literals;
  constexpr std::size_t kBytes = 100000;  // past one shared-memory slot and a TCP segment
  const std::string why = "rank 0: giving up on purpose";
  std::vector<std::byte> into(kBytes, std::byte{0x11});
  std::atomic<bool> poisoned{false};
  std::size_t written = 0;
  std::string wait_error;
  const auto errors = run_two([&](net::Transport& t) {
    const net::Tag tag{9, 1, 0};
    if (t.rank() == 0) {
      const net::Handle h = t.recv(1, tag, into);
      t.poison(Code::aborted, why);
      poisoned = true;
      std::this_thread::sleep_for(300ms);  // rank 1's message would land here
      written = kBytes - static_cast<std::size_t>(std::count(into.begin(), into.end(), std::byte{0x11}));
      try {
        t.wait(h);
      } catch (const Error& e) {
        wait_error = e.what();
      }
      return;
    }
    for (int i = 0; i < 500 && !poisoned; ++i) std::this_thread::sleep_for(10ms);
    const std::vector<std::byte> out(kBytes, std::byte{0x55});
    t.wait(t.send(0, tag, out));
    std::vector<std::byte> none(4);
    t.wait(t.recv(0, {9, 2, 0}, none));  // rank 0 never sends this
  });
  CAPTURE(errors[0]);
  CAPTURE(errors[1]);
  CHECK(written == 0);
  CHECK(wait_error.find("giving up on purpose") != std::string::npos);  // not a timeout
  CHECK(!errors[1].empty());
  if (peers_hear) CHECK(errors[1].find("giving up on purpose") != std::string::npos);
}

}  // namespace dpg::test
