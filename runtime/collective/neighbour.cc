#include "runtime/collective/neighbour.h"

#include <algorithm>

#include "runtime/core/error.h"

namespace dpg::collective {

NeighbourExchange::NeighbourExchange(net::Transport& transport, std::size_t chunk_bytes,
                                     std::size_t window_chunks)
    : transport_(transport),
      chunk_floats_(std::max<std::size_t>(1, chunk_bytes / sizeof(float))),
      window_(std::max<std::size_t>(1, window_chunks)) {}

std::pair<std::size_t, std::size_t> NeighbourExchange::range(std::size_t c) const {
  const std::size_t b = std::min(count_, c * chunk_floats_);
  return {b, std::min(count_, b + chunk_floats_)};
}

// Chunk c from every neighbour, into window slot c mod window.
void NeighbourExchange::post_recv(std::size_t c) {
  const auto [b, e] = range(c);
  const net::Tag tag{kOpGossip, round_, static_cast<uint32_t>(c)};
  const std::size_t n = recv_from_.size();
  for (std::size_t k = 0; k < n; ++k) {
    float* slot = slots_.data() + ((c % window_) * n + k) * stride_;
    recvs_[c * n + k] = transport_.recv(recv_from_[k], tag,
                                        std::as_writable_bytes(std::span<float>(slot, e - b)));
  }
}

void NeighbourExchange::start(uint64_t round, Wire<const float> wire,
                              std::span<const int> send_to, std::span<const int> recv_from,
                              std::size_t ready) {
  const std::span<const float> mine = wire.values();
  if (active_) fail(Code::internal, "neighbour exchange: start() before finish()");
  round_ = round;
  count_ = mine.size();
  chunks_ = std::max<std::size_t>(1, (count_ + chunk_floats_ - 1) / chunk_floats_);
  recv_from_.assign(recv_from.begin(), recv_from.end());
  const std::size_t n = recv_from_.size();
  // A slot holds the largest chunk; fewer slots when the message has fewer chunks.
  stride_ = std::min(chunk_floats_, count_);
  slots_.assign(std::min(window_, chunks_) * n * stride_, 0.0f);
  recvs_.assign(chunks_ * n, net::Handle{});
  sends_.assign(chunks_ * send_to.size(), net::Handle{});
  // Receives first, so that a neighbour's first chunks never wait on a receive not yet posted.
  for (std::size_t c = 0; c < std::min(window_, chunks_); ++c) post_recv(c);
  mine_ = mine;
  send_to_.assign(send_to.begin(), send_to.end());
  sent_chunks_ = 0;
  active_ = true;
  this->ready(ready);
}

void NeighbourExchange::ready(std::size_t ready) {
  if (!active_) fail(Code::internal, "neighbour exchange: ready() outside an exchange");
  for (; sent_chunks_ < chunks_; ++sent_chunks_) {
    const auto [b, e] = range(sent_chunks_);
    if (e > ready) break;  // (an empty model's one empty chunk goes at once)
    const net::Tag tag{kOpGossip, round_, static_cast<uint32_t>(sent_chunks_)};
    for (std::size_t k = 0; k < send_to_.size(); ++k) {
      sends_[sent_chunks_ * send_to_.size() + k] =
          transport_.send(send_to_[k], tag, std::as_bytes(mine_.subspan(b, e - b)));
    }
  }
}

void NeighbourExchange::finish(const OnChunk& on_chunk) {
  if (!active_) fail(Code::internal, "neighbour exchange: finish() without start()");
  ready(count_);  // whatever the caller did not hand over yet
  active_ = false;  // a failure below poisons the transport; nothing is left to finish
  const std::size_t n = recv_from_.size();
  std::vector<std::span<const float>> pieces(n);
  for (std::size_t c = 0; c < chunks_; ++c) {
    const auto [b, e] = range(c);
    for (std::size_t k = 0; k < n; ++k) {
      transport_.wait(recvs_[c * n + k]);
      pieces[k] = std::span<const float>(slots_.data() + ((c % window_) * n + k) * stride_,
                                         e - b);
    }
    on_chunk(b, e, pieces);
    if (c + window_ < chunks_) post_recv(c + window_);  // into the slots just combined
  }
  for (const auto& h : sends_) transport_.wait(h);
}

void mix_range(std::span<float> out, float self_weight, std::span<const float> mine,
               std::span<const float> weights, std::span<const std::span<const float>> pieces,
               std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) out[i] = self_weight * mine[i];
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    const float w = weights[k];
    const float* in = pieces[k].data();
    for (std::size_t i = begin; i < end; ++i) out[i] += w * in[i - begin];
  }
}

}  // namespace dpg::collective
