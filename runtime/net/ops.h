// Every operation id a Tag carries, in one place, so that no two users of a transport pick the
// same one. A tag must be unique among the operations in flight between two peers (transport.h);
// each user below also numbers its rounds, so ids only need to tell the users apart.
#pragma once

#include <cstdint>

namespace dpg::net {

// Ids below kOpsPerSpace form tag space 0. A collective::Communicator in tag space k (its
// Options::tag_space; the bucketed all-reduce's thread uses space 1) adds k * kOpsPerSpace to
// its collectives' ids, so its tags meet no one else's.
inline constexpr uint32_t kOpsPerSpace = 16;

inline constexpr uint32_t kOpAllreduce = 1;  // collectives (runtime/collective/communicator.h)
inline constexpr uint32_t kOpBroadcast = 2;
inline constexpr uint32_t kOpAllgather = 3;
inline constexpr uint32_t kOpGossip = 4;     // a model to a neighbour (collective/neighbour.h)
inline constexpr uint32_t kOpPsPush = 5;     // a worker's gradient shard to a server (train/ps.h);
                                             // ps-async's message service, both ways
inline constexpr uint32_t kOpPsPull = 6;     // a server's updated shard back to a worker (ps-sync)
inline constexpr uint32_t kOpAdPsgd = 7;     // an ad-psgd request or reply (train/algo_ad_psgd.cc)
// A device buffer to a peer (collective/device_collectives.h's HostMemoryCollectives::exchange).
inline constexpr uint32_t kOpDeviceExchange = 8;

// A link's probe: its pings, bulk transfer and figures (net/link_probe.h).
inline constexpr uint32_t kOpProbe = 9;

// The partial all-reduce (train/algo_partial.cc): requests to join a group, by its service, and a
// member's model to another member of its group.
inline constexpr uint32_t kOpGroups = 10;
inline constexpr uint32_t kOpGroupModel = 11;

// A consensus report of an asynchronous algorithm: rank 0 asks a peer for its model
// (train/consensus_poll.h).
inline constexpr uint32_t kOpReport = 12;
// A peer's trace part to rank 0, which writes the run's trace (apps/trace_output.cc).
inline constexpr uint32_t kOpTrace = 13;
// A peer's live figures to rank 0, for the status page (apps/status_feed.h).
inline constexpr uint32_t kOpStatus = 14;

static_assert(kOpStatus < kOpsPerSpace, "every id of space 0 stays below kOpsPerSpace");

}  // namespace dpg::net
