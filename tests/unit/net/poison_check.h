// Shared by the transports' tests: a transport failed by its owner (Transport::poison, or a send
// it refuses) with operations posted.
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

// Rank 0 posts a receive, then fails its transport with `give_up`, which returns the text the
// failure must carry; only then does rank 1 send into it. The receive's buffer must stay as it
// was (its owner may have freed it), rank 0's wait must throw that failure, and, where
// `peers_hear` (TCP and shared memory tell their peers of a failure), rank 1's next receive from
// rank 0 fails naming it rather than timing out.
inline void check_given_up(const RunTwo& run_two, bool peers_hear,
                           const std::function<std::string(net::Transport&)>& give_up) {
  using namespace std::chrono_literals;
  constexpr std::size_t kBytes = 100000;  // past one shared-memory slot and a TCP segment
  std::vector<std::byte> into(kBytes, std::byte{0x11});
  std::atomic<bool> poisoned{false};
  std::size_t written = 0;
  std::string why, wait_error;
  const auto errors = run_two([&](net::Transport& t) {
    const net::Tag tag{9, 1, 0};
    if (t.rank() == 0) {
      const net::Handle h = t.recv(1, tag, into);
      why = give_up(t);
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
  CAPTURE(why);
  REQUIRE(!why.empty());
  CHECK(written == 0);
  CHECK(wait_error.find(why) != std::string::npos);  // not a timeout
  CHECK(!errors[1].empty());
  if (peers_hear) CHECK(errors[1].find(why) != std::string::npos);
}

// Transport::poison, the owner giving up with operations posted.
inline void check_poison(const RunTwo& run_two, bool peers_hear) {
  check_given_up(run_two, peers_hear, [](net::Transport& t) {
    t.poison(Code::aborted, "rank 0: giving up on purpose");
    return std::string("giving up on purpose");
  });
}

// A send to a peer the transport has no connection to (rank 5 of 2) fails the transport as
// poison() does: the caller unwinds from it with its receive posted.
inline void check_refused_send_poisons(const RunTwo& run_two, bool peers_hear) {
  check_given_up(run_two, peers_hear, [](net::Transport& t) {
    const std::vector<std::byte> small(4);
    try {
      t.send(5, {9, 3, 0}, small);
    } catch (const Error& e) {
      const std::string text = e.what();
      const std::string prefix = "rank 0: ";
      return text.rfind(prefix, 0) == 0 ? text.substr(prefix.size()) : text;
    }
    return std::string();  // not refused: check_given_up fails on the empty text
  });
}

}  // namespace dpg::test
