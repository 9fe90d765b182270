// Shared by the collective and gossip tests: an n-peer in-process world, one thread per rank.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/collective/communicator.h"
#include "runtime/net/inproc/inproc_transport.h"

namespace dpg::test {

// Runs body(rank, transport) on every rank of an n-peer in-process world whose waits time out
// after `timeout`, one thread each; returns each rank's exception (null when it passed).
inline std::vector<std::exception_ptr> run_ranks(
    int n, std::chrono::milliseconds timeout, const std::function<void(int, net::Transport&)>& body) {
  net::InprocFabric fabric(n, timeout);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r, fabric.peer(r));
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// With 20 s waits; rethrows the first failure.
inline void run_transports(int n, const std::function<void(int, net::Transport&)>& body) {
  for (auto& e : run_ranks(n, std::chrono::seconds(20), body)) {
    if (e) std::rethrow_exception(e);
  }
}

// Each rank's error message ("" when it passed) instead.
inline std::vector<std::string> run_transports_errors(
    int n, std::chrono::milliseconds timeout, const std::function<void(int, net::Transport&)>& body) {
  std::vector<std::string> messages;
  for (auto& e : run_ranks(n, timeout, body)) {
    try {
      if (e) std::rethrow_exception(e);
      messages.emplace_back();
    } catch (const std::exception& ex) {
      messages.emplace_back(ex.what());
    }
  }
  return messages;
}

// The same with a Communicator over each rank's transport: body(comm).
inline void run_world(int n, collective::Options options,
                      const std::function<void(collective::Communicator&)>& body) {
  run_transports(n, [&](int, net::Transport& t) {
    collective::Communicator comm(t, options);
    body(comm);
  });
}

}  // namespace dpg::test
