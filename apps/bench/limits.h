// The machine's own limits, measured by `bench allreduce` beside its rows, so that a bandwidth
// can be read as a share of what the machine allows rather than only against another library.
#pragma once

namespace dpg::app {

// One core's memory copy bandwidth (bytes copied per second, GB/s), the best of a few copies of
// 64 MiB, well beyond the caches: what one peer can move per second at most when every byte is
// copied once, the ceiling a shared-memory all-reduce is measured against.
double memcpy_GBps();

// TCP over loopback between two threads of this process, full duplex: one connection on
// 127.0.0.1, each end sending 256 MiB in 4 MiB writes while reading what the other sends, as
// the two peers of a 2-peer ring do. Returns the bytes per second each direction carried
// (GB/s), the best of 3 runs: the ceiling a 2-peer all-reduce over TCP is measured against
// (its bus bandwidth is the bytes each peer sends per second). Throws unavailable when a
// socket call fails.
double tcp_loopback_GBps();

}  // namespace dpg::app
