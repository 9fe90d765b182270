#include "apps/trace_output.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/json_io.h"
#include "runtime/core/log.h"

namespace dpg::app {

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
  // Every part's length, then every part padded to the longest (the all-gather takes equal sizes).
  std::vector<std::uint64_t> sizes(static_cast<std::size_t>(world), 0);
  const std::uint64_t my_size = mine.size();
  std::vector<std::string> parts;
  if (comm) {
    comm->allgather(public_value(std::as_bytes(std::span<const std::uint64_t>(&my_size, 1))),
                    std::as_writable_bytes(std::span<std::uint64_t>(sizes)));
    const std::size_t longest = *std::max_element(sizes.begin(), sizes.end());
    std::vector<std::byte> padded(longest), all(longest * static_cast<std::size_t>(world));
    std::memcpy(padded.data(), mine.data(), mine.size());
    // --trace asks every peer to share its timeline (docs/TRACE.md).
    comm->allgather(public_value(std::span<const std::byte>(padded)), all);
    for (int r = 0; r < world; ++r) {
      const char* at = reinterpret_cast<const char*>(all.data()) + longest * static_cast<std::size_t>(r);
      parts.emplace_back(at, sizes[static_cast<std::size_t>(r)]);
    }
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
