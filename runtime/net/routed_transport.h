// A transport that carries each peer's messages over one of two others: shared memory for the
// peers on this host and TCP for the rest, as apps/ chooses (apps/transport_setup.h). Matching,
// ordering and deadlines are the chosen transport's; the first failure of either poisons this
// one and the other (Transport::poison), so every later wait throws it, whichever transport it
// is on, and neither moves more bytes through the buffers of operations still posted.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/net/transport.h"

namespace dpg::net {

class RoutedTransport final : public Transport {
 public:
  // route[p] is 0 when `first` carries peer p and 1 when `second` does (the entry for this rank
  // is unused). Both must have this rank, world and timeout; the one routed nothing may be null.
  RoutedTransport(std::unique_ptr<Transport> first, std::unique_ptr<Transport> second,
                  std::vector<int> route);

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  Handle send(int peer, Tag tag, std::span<const std::byte> data) override;
  Handle recv(int peer, Tag tag, std::span<std::byte> data) override;
  void wait(Handle handle) override;
  std::chrono::milliseconds timeout() const override { return timeout_; }
  void poison(Code code, const std::string& message) override;

 private:
  static constexpr uint32_t kSecond = 0x80000000u;  // the handle bit that names `second`
  Transport& route(int peer, const char* what);
  void rethrow_first() const;

  int rank_ = 0;
  int world_ = 0;
  std::chrono::milliseconds timeout_{};
  std::unique_ptr<Transport> parts_[2];
  std::vector<int> route_;
  mutable std::mutex mu_;
  std::optional<Error> first_failure_;
};

}  // namespace dpg::net
