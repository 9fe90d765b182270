#include "runtime/collective/neighbour.h"

#include <algorithm>

#include "runtime/core/error.h"

namespace dpg::collective {

NeighbourExchange::NeighbourExchange(net::Transport& transport, std::size_t chunk_bytes)
    : transport_(transport), chunk_floats_(std::max<std::size_t>(1, chunk_bytes / sizeof(float))) {}

void NeighbourExchange::start(uint64_t round, std::span<const float> mine,
                              std::span<const int> send_to, std::span<const int> recv_from,
                              std::span<const std::span<float>> inbox) {
  if (active_) fail(Code::internal, "neighbour exchange: start() before finish()");
  if (inbox.size() != recv_from.size()) {
    fail(Code::internal, "neighbour exchange: one inbox per peer received from");
  }
  for (const auto& box : inbox) {
    if (box.size() != mine.size()) fail(Code::internal, "neighbour exchange: inbox size");
  }
  count_ = mine.size();
  chunks_ = std::max<std::size_t>(1, (count_ + chunk_floats_ - 1) / chunk_floats_);
  neighbours_ = recv_from.size();
  recvs_.assign(chunks_ * neighbours_, net::Handle{});
  sends_.assign(chunks_ * send_to.size(), net::Handle{});
  auto range = [&](std::size_t c) {
    const std::size_t b = std::min(count_, c * chunk_floats_);
    return std::pair{b, std::min(count_, b + chunk_floats_)};
  };
  // Receives first, so that a neighbour's chunks never wait on a receive not yet posted.
  for (std::size_t c = 0; c < chunks_; ++c) {
    const auto [b, e] = range(c);
    const net::Tag tag{kOpGossip, round, static_cast<uint32_t>(c)};
    for (std::size_t k = 0; k < neighbours_; ++k) {
      recvs_[c * neighbours_ + k] =
          transport_.recv(recv_from[k], tag, std::as_writable_bytes(inbox[k].subspan(b, e - b)));
    }
  }
  for (std::size_t c = 0; c < chunks_; ++c) {
    const auto [b, e] = range(c);
    const net::Tag tag{kOpGossip, round, static_cast<uint32_t>(c)};
    for (std::size_t k = 0; k < send_to.size(); ++k) {
      sends_[c * send_to.size() + k] =
          transport_.send(send_to[k], tag, std::as_bytes(mine.subspan(b, e - b)));
    }
  }
  active_ = true;
}

void NeighbourExchange::finish(const std::function<void(std::size_t, std::size_t)>& on_chunk) {
  if (!active_) fail(Code::internal, "neighbour exchange: finish() without start()");
  active_ = false;  // a failure below poisons the transport; nothing is left to finish
  for (std::size_t c = 0; c < chunks_; ++c) {
    for (std::size_t k = 0; k < neighbours_; ++k) transport_.wait(recvs_[c * neighbours_ + k]);
    const std::size_t b = std::min(count_, c * chunk_floats_);
    on_chunk(b, std::min(count_, b + chunk_floats_));
  }
  for (const auto& h : sends_) transport_.wait(h);
}

void mix_range(std::span<float> out, float self_weight, std::span<const float> mine,
               std::span<const float> weights, std::span<const std::span<float>> inbox,
               std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) out[i] = self_weight * mine[i];
  for (std::size_t k = 0; k < inbox.size(); ++k) {
    const float w = weights[k];
    const float* in = inbox[k].data();
    for (std::size_t i = begin; i < end; ++i) out[i] += w * in[i];
  }
}

}  // namespace dpg::collective
