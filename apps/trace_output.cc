#include "apps/trace_output.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/json_io.h"
#include "runtime/core/log.h"
#include "runtime/net/ops.h"

namespace dpg::app {
namespace {

// The most a peer's trace part may weigh when it reaches rank 0 (its size comes from the peer).
constexpr std::uint64_t kMaxTracePartBytes = std::uint64_t{256} << 20;

}  // namespace

std::string trace_part_path(const std::string& file, int rank) {
  return file + ".rank" + std::to_string(rank) + ".json";
}

void open_trace(trace::Tracer& tracer, const std::string& file, int rank) {
  if (file.empty()) return;
  tracer.open(trace_part_path(file, rank), rank, "rank " + std::to_string(rank));
  tracer.name_thread("training");
}

void finish_trace(trace::Tracer& tracer, collective::Communicator* comm, const std::string& file) {
  if (file.empty()) return;
  const int rank = comm ? comm->rank() : 0, world = comm ? comm->world() : 1;
  const std::string mine_path = trace_part_path(file, rank);
  tracer.close();
  const std::string mine = trace::read_trace_part(mine_path);
  // Each peer's timeline goes to rank 0 alone, which writes the file: a step's times follow its
  // realised (private) batch, so no other peer receives them (docs/TRACE.md, docs/PRIVACY.md).
  std::vector<std::string> parts;
  if (comm && rank != 0) {
    const std::uint64_t my_size = mine.size();
    const auto size_bytes = std::as_bytes(std::span<const std::uint64_t>(&my_size, 1));
    comm->wait(comm->send(0, {net::kOpTrace, 0, 0}, public_value(size_bytes)));
    // --trace asks every peer to share its timeline with rank 0 (docs/TRACE.md).
    comm->wait(comm->send(0, {net::kOpTrace, 0, 1},
                          public_value(std::as_bytes(std::span<const char>(mine)))));
  } else if (comm) {
    std::vector<std::uint64_t> sizes(static_cast<std::size_t>(world), 0);
    std::vector<net::Handle> posted;
    for (int r = 1; r < world; ++r) {
      std::uint64_t& size = sizes[static_cast<std::size_t>(r)];
      posted.push_back(
          comm->recv(r, {net::kOpTrace, 0, 0}, std::as_writable_bytes(std::span(&size, 1))));
    }
    for (net::Handle h : posted) comm->wait(h);
    parts.assign(static_cast<std::size_t>(world), std::string());
    parts[0] = mine;
    posted.clear();
    for (int r = 1; r < world; ++r) {
      std::string& part = parts[static_cast<std::size_t>(r)];
      const std::uint64_t size = sizes[static_cast<std::size_t>(r)];
      if (size > kMaxTracePartBytes) {
        fail(Code::data_loss, "trace: peer " + std::to_string(r) + "'s part of " +
                                           std::to_string(size) + " bytes passes the bound of " +
                                           std::to_string(kMaxTracePartBytes));
      }
      part.resize(static_cast<std::size_t>(size));
      posted.push_back(
          comm->recv(r, {net::kOpTrace, 0, 1}, std::as_writable_bytes(std::span(part))));
    }
    for (net::Handle h : posted) comm->wait(h);
  } else {
    parts.push_back(mine);
  }
  if (rank == 0) {
    write_file_atomic(file, trace::merge_trace_parts(parts));
    DPG_INFO("train: trace of " << world << " peer(s) written to " << file);
  }
  if (comm) comm->barrier();  // rank 0 has read everything before the parts go
  std::error_code ignored;
  std::filesystem::remove(mine_path, ignored);
}

}  // namespace dpg::app
