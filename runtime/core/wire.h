// What may leave this peer. A Wire<T> is a view of values that a collective, gossip's exchange or
// the message service may send: the only argument they take (runtime/collective). Its
// constructor is private, and its issuers are exactly these, each a name a reviewer can grep:
//   - dp::GaussianMechanism: a released (noised) gradient and the sums the peers form of
//     released gradients (exchange(), aggregate());
//   - public_model(): the model and its parts, which only the seeded initialisation, the
//     optimiser's updates from released gradients, and means and mixes of public models make
//     (and a checkpoint of those); an algorithm sees no other float buffer of the run's;
//   - public_value(): facts public by construction (shard sizes from the manifest, stop flags,
//     counts of the shared test split, public keys, timings a trace is asked to share, a
//     benchmark's synthetic buffers);
//   - arrived(): what a completed receive wrote from a peer (the message service's requests, a
//     parameter server's pushes), as public as what that peer sent, which was a Wire there;
//   - device_memory(): a device model's parameters or released gradient, which reach the host
//     collectives (HostMemoryCollectives) as raw device pointers: the device's interface
//     (collective::DeviceCollectives, NCCL) is not typed yet (docs/ARCHITECTURE.md, "DP in the
//     types").
// A raw buffer handed to a collective does not compile (tests/compile_fail). What arrives from a
// peer into a Wire is as public as what was sent.
#pragma once

#include <cstddef>
#include <ranges>
#include <span>
#include <type_traits>

namespace dpg {

namespace dp {
class GaussianMechanism;
}

template <class T>
class Wire;
template <class T>
Wire<T> public_model(std::span<T> params);
template <class T>
Wire<T> public_value(std::span<T> values);
template <class T>
Wire<T> device_memory(std::span<T> values);
template <class T>
Wire<T> arrived(std::span<T> values);

template <class T>
class Wire {
 public:
  std::span<T> values() const { return values_; }
  std::size_t size() const { return values_.size(); }
  // A part of a value that may leave may leave.
  Wire subspan(std::size_t offset, std::size_t count = std::dynamic_extent) const {
    return Wire(values_.subspan(offset, count));
  }
  operator Wire<const T>() const { return Wire<const T>(values_); }  // NOLINT: a view
  // Bytes that carry values of type U (a message's payload), as those values.
  template <class U>
  Wire<const U> as() const
    requires std::is_same_v<std::remove_const_t<T>, std::byte>
  {
    return Wire<const U>(std::span<const U>(reinterpret_cast<const U*>(values_.data()),
                                            values_.size() / sizeof(U)));
  }
  // Its bytes, for the byte-wise collectives.
  auto bytes() const {
    if constexpr (std::is_const_v<T>) {
      return Wire<const std::byte>(std::as_bytes(values_));
    } else {
      return Wire<std::byte>(std::as_writable_bytes(values_));
    }
  }

 private:
  explicit Wire(std::span<T> values) : values_(values) {}
  std::span<T> values_;

  template <class U>
  friend class Wire;
  template <class U>
  friend Wire<U> public_model(std::span<U>);
  template <class U>
  friend Wire<U> public_value(std::span<U>);
  template <class U>
  friend Wire<U> device_memory(std::span<U>);
  template <class U>
  friend Wire<U> arrived(std::span<U>);
  friend class dp::GaussianMechanism;
};

template <class T>
Wire<T> public_model(std::span<T> params) {
  return Wire<T>(params);
}

template <class T>
Wire<T> public_value(std::span<T> values) {
  return Wire<T>(values);
}

template <class T>
Wire<T> device_memory(std::span<T> values) {
  return Wire<T>(values);
}
template <class T>
Wire<T> arrived(std::span<T> values) {
  return Wire<T>(values);
}

// The same from a fixed-size span or a contiguous container (a vector, an array).
template <class T>
inline constexpr bool is_span_v = false;
template <class T, std::size_t N>
inline constexpr bool is_span_v<std::span<T, N>> = true;

template <class T, std::size_t N>
  requires(N != std::dynamic_extent)
Wire<T> public_value(std::span<T, N> values) {
  return public_value(std::span<T>(values));
}
template <class R>
  requires(std::ranges::contiguous_range<R> && !is_span_v<std::remove_cvref_t<R>>)
auto public_value(R& values) {
  return public_value(std::span(std::ranges::data(values), std::ranges::size(values)));
}
template <class T, std::size_t N>
  requires(N != std::dynamic_extent)
Wire<T> public_model(std::span<T, N> values) {
  return public_model(std::span<T>(values));
}
template <class R>
  requires(std::ranges::contiguous_range<R> && !is_span_v<std::remove_cvref_t<R>>)
auto public_model(R& values) {
  return public_model(std::span(std::ranges::data(values), std::ranges::size(values)));
}

}  // namespace dpg
