// The machine's own limits, measured by `bench allreduce` beside its rows, so that a bandwidth
// can be read as a share of what the machine allows rather than only against another library.
#pragma once

namespace dpg::app {

// One core's memory copy bandwidth (bytes copied per second, GB/s), the best of a few copies of
// 64 MiB, well beyond the caches: what one peer can move per second at most when every byte is
// copied once, the ceiling a shared-memory all-reduce is measured against.
double memcpy_GBps();

// TCP over loopback between two threads of this process: one connection on 127.0.0.1, one end
// sending 256 MiB in 4 MiB writes, the other reading them; the best of 3, in bytes per second
// (GB/s). Every byte is copied twice by the kernel (into the socket buffer and out of it), on
// two cores at once: what the loopback carries in all, the ceiling of the bytes per second all
// local peers of a TCP all-reduce send together. Throws unavailable when a socket call fails.
double tcp_loopback_GBps();

}  // namespace dpg::app
