#include "runtime/collective/communicator.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "runtime/core/error.h"

namespace dpg::collective {
namespace {

std::span<std::byte> bytes_of(std::span<std::byte> s, std::size_t begin, std::size_t end) {
  return s.subspan(begin, end - begin);
}

}  // namespace

namespace {

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

// The element types the all-reduce kernels take: float and double, which Reduce::average divides,
// and uint32_t, only ever summed. Its additions are unsigned int arithmetic, which wraps modulo
// 2^32 (a narrower unsigned type would be promoted to int, where overflow is undefined: none is
// allowed), and the averaging code is compiled for floating point only.
template <typename T>
constexpr bool kElement = std::is_floating_point_v<T> || std::is_same_v<T, std::uint32_t>;

// Where the ring all-reduce's pieces lie: N blocks of the buffer, block b at
// [count b / N, count (b+1) / N), each cut into `nseg` segments; and which block step g sends
// to the right and receives from the left (steps [0, N-1) reduce-scatter, the rest all-gather).
struct RingLayout {
  RingLayout(int n, int r, std::size_t count, std::size_t elem_bytes, std::size_t segment_bytes)
      : n(n), r(r), count(count), max_block((count + n - 1) / n),
        nseg(std::max<std::size_t>(1, (max_block * elem_bytes + segment_bytes - 1) / segment_bytes)),
        left(mod(r - 1)), right(mod(r + 1)) {}

  int mod(long long b) const { return static_cast<int>(((b % n) + n) % n); }
  std::size_t block_begin(int b) const { return count * static_cast<std::size_t>(b) / n; }
  // Element range [begin, end) of segment k of block b.
  std::pair<std::size_t, std::size_t> segment(int b, std::size_t k) const {
    const std::size_t b0 = block_begin(b), m = block_begin(b + 1) - b0;
    return {b0 + m * k / nseg, b0 + m * (k + 1) / nseg};
  }
  int send_block(int g) const { return g < n - 1 ? mod(r - g) : mod(r + 1 - (g - (n - 1))); }
  int recv_block(int g) const { return g < n - 1 ? mod(r - g - 1) : mod(r - (g - (n - 1))); }

  const int n, r;
  const std::size_t count, max_block, nseg;
  const int left, right;
};

// An average's division, p[i] *= 1/n over `len` elements: one multiply by the inverse, as every
// all-reduce kernel divides, so that each gives the same bits. Floating point only; integers are
// only ever summed.
template <typename T>
void divide(T* p, std::size_t len, int n) {
  if constexpr (std::is_floating_point_v<T>) {
    const T inv_n = T(1) / static_cast<T>(n);
    for (std::size_t j = 0; j < len; ++j) p[j] *= inv_n;
  }
}

// dst += src over `len` elements, then, with `divide_by` > 1, the average's division.
template <typename T>
void add_into(T* dst, const T* src, std::size_t len, int divide_by) {
  for (std::size_t j = 0; j < len; ++j) dst[j] += src[j];
  if (divide_by > 1) divide(dst, len, divide_by);
}

}  // namespace

std::vector<int> peers_needed(int rank, int world, const Options& options) {
  std::vector<int> p;
  auto add = [&](int q) {
    if (q != rank && std::find(p.begin(), p.end(), q) == p.end()) p.push_back(q);
  };
  if (world > 1) {
    add((rank + 1) % world);
    add((rank + world - 1) % world);
  }
  if ((options.small_bytes > 0 || options.medium_bytes > 0) && power_of_two(world)) {
    for (int k = 1; k < world; k <<= 1) add(rank ^ k);
  }
  return p;
}

Communicator::Communicator(net::Transport& transport, Options options)
    : transport_(transport), options_(options) {
  if (options_.segment_bytes == 0) fail(Code::invalid_argument, "segment_bytes must be positive");
}

void Communicator::allreduce(Wire<float> data, Reduce op) {
  if (float_route_) {
    float_route_(data.values(), op);
    return;
  }
  allreduce_any(data.values(), op);
}
void Communicator::allreduce(Wire<double> data, Reduce op) { allreduce_any(data.values(), op); }
void Communicator::allreduce(Wire<std::uint32_t> data) { allreduce_any(data.values(), Reduce::sum); }

template <typename T>
void Communicator::allreduce_any(std::span<T> data, Reduce op) {
  static_assert(kElement<T>);
  if constexpr (!std::is_floating_point_v<T>) {
    if (op != Reduce::sum) fail(Code::internal, "an integer all-reduce can only sum");
  }
  const bool pow2 = power_of_two(world());
  if (data.size_bytes() <= options_.small_bytes && pow2) {
    doubling_allreduce(data, op);
  } else if (data.size_bytes() <= options_.medium_bytes && pow2) {
    halving_doubling_allreduce(data, op);
  } else {
    ring_allreduce(data, op);
  }
}

// Recursive doubling: at step k each peer swaps its whole buffer with peer rank xor 2^k and both
// add the two in the same order (lower rank first), so each pair, and in the end every peer,
// holds the same bits. log2(N) steps; for small buffers, where the step count is the cost.
template <typename T>
void Communicator::doubling_allreduce(std::span<T> data, Reduce op) {
  const int n = world();
  const int r = rank();
  const uint64_t round = next_round();
  if (n == 1 || data.empty()) return;
  scratch_.resize(data.size_bytes());
  T* other = reinterpret_cast<T*>(scratch_.data());
  auto theirs = std::as_writable_bytes(std::span<T>(other, data.size()));
  uint32_t step = 0;
  for (int k = 1; k < n; k <<= 1, ++step) {
    const int partner = r ^ k;
    const net::Tag tag{op_id(kOpAllreduce), round, step};
    net::Handle in = transport_.recv(partner, tag, theirs);
    net::Handle out = transport_.send(partner, tag, std::as_bytes(data));
    transport_.wait(in);
    transport_.wait(out);  // data is about to change
    T* mine = data.data();
    if (r < partner) {
      for (std::size_t i = 0; i < data.size(); ++i) mine[i] = mine[i] + other[i];
    } else {
      for (std::size_t i = 0; i < data.size(); ++i) mine[i] = other[i] + mine[i];
    }
  }
  if (op == Reduce::average) divide(data.data(), data.size(), n);
}

// Halving-doubling on N = 2^m peers, with the buffer cut into N blocks as in the ring. The
// reduce-scatter halves: at distance k = N/2, N/4, ..., 1 each peer keeps the half of its block
// range on its side of bit k, sends the other half to rank xor k and adds that peer's copy of the
// kept half; in the end peer r owns block r, summed by it alone. The all-gather doubles back
// (k = 1, 2, ..., N/2), swapping owned ranges, so every peer holds each owner's bits.
template <typename T>
void Communicator::halving_doubling_allreduce(std::span<T> data, Reduce op) {
  const int n = world();
  const int r = rank();
  const uint64_t round = next_round();
  const std::size_t count = data.size();
  if (n == 1 || count == 0) return;
  auto at = [&](int b) { return count * static_cast<std::size_t>(b) / n; };  // block b's start
  auto range = [&](int lo, int hi) {
    return std::as_writable_bytes(data.subspan(at(lo), at(hi) - at(lo)));
  };
  scratch_.resize((count + 1) / 2 * sizeof(T));  // the largest half kept, at the first step
  T* other = reinterpret_cast<T*>(scratch_.data());
  uint32_t step = 0;
  int lo = 0, hi = n;
  for (int k = n / 2; k >= 1; k /= 2, ++step) {
    const int partner = r ^ k, mid = (lo + hi) / 2;
    const bool low_side = (r & k) == 0;
    const int keep_lo = low_side ? lo : mid, keep_hi = low_side ? mid : hi;
    const net::Tag tag{op_id(kOpAllreduce), round, step};
    const std::size_t kept = at(keep_hi) - at(keep_lo);
    net::Handle in = transport_.recv(partner, tag,
                                     std::as_writable_bytes(std::span<T>(other, kept)));
    net::Handle out = transport_.send(partner, tag, low_side ? range(mid, hi) : range(lo, mid));
    transport_.wait(in);
    T* mine = data.data() + at(keep_lo);
    for (std::size_t i = 0; i < kept; ++i) mine[i] += other[i];
    transport_.wait(out);
    lo = keep_lo;
    hi = keep_hi;
  }
  if (op == Reduce::average) divide(data.data() + at(r), at(r + 1) - at(r), n);
  for (int k = 1; k < n; k *= 2, ++step) {
    const int partner = r ^ k;
    const bool low_side = (r & k) == 0;
    const int width = hi - lo;
    const int their_lo = low_side ? lo + width : lo - width;
    const net::Tag tag{op_id(kOpAllreduce), round, step};
    net::Handle in = transport_.recv(partner, tag, range(their_lo, their_lo + width));
    net::Handle out = transport_.send(partner, tag, range(lo, hi));
    transport_.wait(in);
    transport_.wait(out);
    lo = std::min(lo, their_lo);
    hi = lo + 2 * width;
  }
}

// Reduce-scatter then all-gather around the ring, in 2(N-1) steps. Step g sends one block to
// the right and receives one from the left; every block is cut into `nseg` segments, and a
// segment goes on to the next step as soon as it has arrived (and been reduced), so the steps
// overlap. The owner of a block finishes its sum (and the division for an average) before the
// all-gather copies it out, so every peer holds the owner's bits.
template <typename T>
void Communicator::ring_allreduce(std::span<T> data, Reduce op) {
  ring(data, op, 0, 2 * (world() - 1));
}

// Steps [g0, g1) of the ring: [0, N-1) is the reduce-scatter, [N-1, 2(N-1)) the all-gather.
template <typename T>
void Communicator::ring(std::span<T> data, Reduce op, int g0, int g1) {
  const int n = world();
  const uint64_t round = next_round();
  const std::size_t count = data.size();
  if (n == 1 || count == 0) return;  // every peer passes the same size, so all skip together

  const RingLayout ring(n, rank(), count, sizeof(T), options_.segment_bytes);
  const std::size_t nseg = ring.nseg;
  const int steps = 2 * (n - 1);
  auto tag = [&](int g, std::size_t k) {
    return net::Tag{op_id(kOpAllreduce), round, static_cast<uint32_t>(g * nseg + k)};
  };

  // Reduce-scatter receive i (= g * nseg + k) lands in slot i % slots.
  const std::size_t rs_count = static_cast<std::size_t>(n - 1) * nseg;
  const std::size_t slot_elems = (ring.max_block + nseg - 1) / nseg;
  const std::size_t slots = std::max<std::size_t>(1, std::min(options_.scratch_slots, rs_count));
  scratch_.resize(slots * slot_elems * sizeof(T));
  T* scratch = reinterpret_cast<T*>(scratch_.data());
  sends_.assign(steps * nseg, net::Handle{});
  recvs_.assign(steps * nseg, net::Handle{});
  // An all-gather alone has no reduce-scatter sends to wait for before it overwrites a block.
  sent_waited_.assign(steps * nseg, 0);
  if (g0 > 0) std::fill(sent_waited_.begin(), sent_waited_.begin() + g0 * nseg, 1);
  auto bytes = std::as_writable_bytes(data);
  auto wait_send = [&](std::size_t i) {
    if (!sent_waited_[i]) {
      transport_.wait(sends_[i]);
      sent_waited_[i] = 1;
    }
  };

  auto post_recv = [&](int g, std::size_t k) {
    const auto [b, e] = ring.segment(ring.recv_block(g), k);
    std::span<std::byte> dst;
    if (g < n - 1) {
      const std::size_t at = ((g * nseg + k) % slots) * slot_elems;
      dst = std::as_writable_bytes(std::span<T>(scratch + at, e - b));
    } else {
      // The all-gather overwrites the block this peer sent at the same reduce-scatter step.
      wait_send((g - (n - 1)) * nseg + k);
      dst = bytes_of(bytes, b * sizeof(T), e * sizeof(T));
    }
    recvs_[g * nseg + k] = transport_.recv(ring.left, tag(g, k), dst);
  };
  auto post_send = [&](int g, std::size_t k) {
    const auto [b, e] = ring.segment(ring.send_block(g), k);
    sends_[g * nseg + k] = transport_.send(ring.right, tag(g, k), bytes_of(bytes, b * sizeof(T),
                                                                           e * sizeof(T)));
  };

  if (g0 == 0) {
    for (std::size_t i = 0; i < slots; ++i) post_recv(static_cast<int>(i / nseg), i % nseg);
  } else {
    for (std::size_t k = 0; k < nseg; ++k) post_recv(g0, k);
  }
  for (std::size_t k = 0; k < nseg; ++k) post_send(g0, k);
  for (int g = g0; g < g1; ++g) {
    for (std::size_t k = 0; k < nseg; ++k) {
      transport_.wait(recvs_[g * nseg + k]);
      if (g < n - 1) {
        const auto [b, e] = ring.segment(ring.recv_block(g), k);
        const std::size_t i = g * nseg + k;
        // The block's last reduce-scatter step also averages: its owner finishes it here.
        add_into(data.data() + b, scratch + (i % slots) * slot_elems, e - b,
                 g == n - 2 && op == Reduce::average ? n : 1);
        // The slot is free again: post the reduce-scatter receive that reuses it.
        if (i + slots < rs_count && static_cast<int>((i + slots) / nseg) < g1) {
          post_recv(static_cast<int>((i + slots) / nseg), (i + slots) % nseg);
        }
      }
      if (g + 1 < g1) {
        if (g + 1 >= n - 1) post_recv(g + 1, k);
        post_send(g + 1, k);
      }
    }
  }
  for (std::size_t i = static_cast<std::size_t>(g0) * nseg; i < static_cast<std::size_t>(g1) * nseg; ++i) {
    wait_send(i);
  }
}

std::pair<std::size_t, std::size_t> Communicator::owned_block(std::size_t count) const {
  const auto n = static_cast<std::size_t>(world());
  const std::size_t b = (static_cast<std::size_t>(rank()) + 1) % n;  // the reduce-scatter's last
  return {count * b / n, count * (b + 1) / n};
}

int Communicator::take_split() {
  if (splits_ >= kMaxSplits) {
    fail(Code::invalid_argument, rank_prefix(rank()) + "more than " +
                                     std::to_string(kMaxSplits) +
                                     " groups split from one communicator");
  }
  return splits_++;
}

void Communicator::reduce_scatter(Wire<float> data, Reduce op) {
  ring(data.values(), op, 0, world() - 1);
}
void Communicator::reduce_scatter(Wire<double> data, Reduce op) {
  ring(data.values(), op, 0, world() - 1);
}
void Communicator::allgather_blocks(Wire<float> data) {
  ring(data.values(), Reduce::sum, world() - 1, 2 * (world() - 1));
}
void Communicator::allgather_blocks(Wire<double> data) {
  ring(data.values(), Reduce::sum, world() - 1, 2 * (world() - 1));
}

void Communicator::broadcast(Wire<std::byte> wire, int root) {
  const std::span<std::byte> data = wire.values();
  const int n = world();
  const int r = rank();
  const uint64_t round = next_round();
  if (root < 0 || root >= n) {
    fail(Code::invalid_argument, "broadcast from rank " + std::to_string(root) + " in a world of " +
                                     std::to_string(n));
  }
  if (n == 1) return;
  const int left = (r + n - 1) % n, right = (r + 1) % n;
  const std::size_t nseg =
      std::max<std::size_t>(1, (data.size() + options_.segment_bytes - 1) / options_.segment_bytes);
  auto piece = [&](std::size_t k) {
    return bytes_of(data, data.size() * k / nseg, data.size() * (k + 1) / nseg);
  };
  auto tag = [&](std::size_t k) {
    return net::Tag{op_id(kOpBroadcast), round, static_cast<uint32_t>(k)};
  };
  recvs_.assign(nseg, net::Handle{});
  sends_.assign(nseg, net::Handle{});
  const bool forwards = right != root;
  if (r == root) {
    for (std::size_t k = 0; k < nseg; ++k) sends_[k] = transport_.send(right, tag(k), piece(k));
  } else {
    for (std::size_t k = 0; k < nseg; ++k) recvs_[k] = transport_.recv(left, tag(k), piece(k));
    for (std::size_t k = 0; k < nseg; ++k) {
      transport_.wait(recvs_[k]);
      if (forwards) sends_[k] = transport_.send(right, tag(k), piece(k));
    }
  }
  if (r == root || forwards) {
    for (std::size_t k = 0; k < nseg; ++k) transport_.wait(sends_[k]);
  }
}

void Communicator::allgather(Wire<const std::byte> wire, std::span<std::byte> out) {
  const std::span<const std::byte> mine = wire.values();
  const int n = world();
  const int r = rank();
  const uint64_t round = next_round();
  const std::size_t m = mine.size();
  if (out.size() != m * n) {
    fail(Code::invalid_argument, "allgather: output of " + std::to_string(out.size()) +
                                     " bytes for " + std::to_string(n) + " blocks of " +
                                     std::to_string(m));
  }
  // Empty blocks may come with null data, which memcpy may not be given even for 0 bytes.
  if (m > 0) std::memcpy(out.data() + r * m, mine.data(), m);
  if (n == 1) return;
  const int left = (r + n - 1) % n, right = (r + 1) % n;
  auto block = [&](int b) { return out.subspan(static_cast<std::size_t>((b % n + n) % n) * m, m); };
  auto tag = [&](int s) {
    return net::Tag{op_id(kOpAllgather), round, static_cast<uint32_t>(s)};
  };
  sends_.assign(n - 1, net::Handle{});
  // Step s forwards the block that arrived at step s - 1 (this peer's own at step 0).
  net::Handle recv = transport_.recv(left, tag(0), block(r - 1));
  sends_[0] = transport_.send(right, tag(0), block(r));
  for (int s = 0; s < n - 1; ++s) {
    transport_.wait(recv);
    if (s + 1 < n - 1) {
      recv = transport_.recv(left, tag(s + 1), block(r - s - 2));
      sends_[s + 1] = transport_.send(right, tag(s + 1), block(r - s - 1));
    }
  }
  for (auto& h : sends_) transport_.wait(h);
}

void Communicator::barrier() {
  std::byte mine{1};
  std::vector<std::byte> all(world());
  allgather(public_value(std::span<const std::byte>(&mine, 1)), all);
}

}  // namespace dpg::collective
