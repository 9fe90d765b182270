// dpgossip-bench-mpi: MPI_Allreduce of float32 sums over MPI_COMM_WORLD, the OpenMPI baseline that
// `dpgossip bench allreduce --baseline mpi` runs beside dpgossip's own ring. Started by mpirun:
//   mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self --mca btl_tcp_if_include lo
//          -np 4 dpgossip-bench-mpi --sizes 4K,64K,1M,16M,64M
// (OpenMPI's TCP transport skips the loopback interface unless told to include it.)
// Each operation is timed alone with MPI_Wtime on rank 0, with no barrier between operations, as
// in the Gloo baseline; OpenMPI chooses its own algorithm per size (its "tuned" component).
// Only MPI's C interface: OpenMPI's deprecated C++ bindings (and their warnings) stay out.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "tools/bench/bench_common.h"

namespace {

// Returns false when any rank saw a wrong element.
bool run_size(const dpg_bench::Args& a, int rank, int n, long long bytes) {
  const int count = static_cast<int>(bytes / 4);
  std::vector<float> in(count), out(count, 0.0f);
  dpg_bench::fill_input(in, rank);

  // Out of place: the input stays the same across repeats, so the last output can be checked.
  const int warmup = dpg::bench::repeats_for_size(bytes, a.warmup);  // scaled as the timed count
  for (int i = 0; i < warmup; ++i) {
    MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  const int repeats = dpg::bench::repeats_for_size(bytes, a.repeats);
  std::vector<double> times_us;
  times_us.reserve(repeats);
  for (int r = 0; r < repeats; ++r) {
    const double start = MPI_Wtime();
    MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    times_us.push_back((MPI_Wtime() - start) * 1e6);
  }

  int bad = dpg_bench::count_mismatches(out, n, rank, bytes, "openmpi") > 0 ? 1 : 0;
  int bad_ranks = 0;
  MPI_Allreduce(&bad, &bad_ranks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) dpg_bench::print_row("openmpi", n, bytes, times_us, bad_ranks == 0);
  return bad_ranks == 0;
}

}  // namespace

int main(int argc, char** argv) {
  dpg_bench::Args a;
  // Parsed before MPI_Init so that a bad flag fails every rank the same way, without MPI.
  if (const int rc = dpg_bench::parse_args(argc, argv, false, a); rc != 0) return rc == 1 ? 0 : 2;

  MPI_Init(&argc, &argv);
  int rank = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n > dpg_bench::kMaxPeers) {
    if (rank == 0) {
      std::fprintf(stderr, "dpgossip-bench-mpi: at most %d ranks\n", dpg_bench::kMaxPeers);
    }
    MPI_Finalize();
    return 2;
  }
  bool ok = true;
  for (long long bytes : a.sizes_bytes) ok = run_size(a, rank, n, bytes) && ok;
  MPI_Finalize();
  return ok ? 0 : 1;
}
