#include "runtime/core/blas.h"

#include <atomic>
#include <mutex>

#include "runtime/core/dynlib.h"

namespace dpg {
namespace {

std::mutex g_mutex;                            // serialises opening and setting the count
std::atomic<int> g_threads{0};                 // the count last set; 0: OpenBLAS's own default
std::atomic<const OpenBlas*> g_open{nullptr};  // the table, once the library is open

OpenBlas load() {
  constexpr const char* kSoname = "libopenblas.so.0";
  void* lib = open_library(kSoname, "libopenblas0");
  return OpenBlas{
      library_function<decltype(&cblas_sgemm)>(lib, kSoname, "cblas_sgemm"),
      library_function<decltype(&cblas_dgemm)>(lib, kSoname, "cblas_dgemm"),
      library_function<decltype(&openblas_set_num_threads)>(lib, kSoname,
                                                            "openblas_set_num_threads"),
      library_function<decltype(&openblas_get_num_threads)>(lib, kSoname,
                                                            "openblas_get_num_threads")};
}

}  // namespace

const OpenBlas& openblas() {
  // Every GEMM on OpenBLAS asks: once open, no lock.
  if (const OpenBlas* open = g_open.load(std::memory_order_acquire)) return *open;
  static const OpenBlas table = load();
  const std::lock_guard lock(g_mutex);
  if (g_open.load(std::memory_order_relaxed) == nullptr) {
    if (const int t = g_threads; t > 0) table.set_num_threads(t);
    g_open.store(&table, std::memory_order_release);
  }
  return table;
}

int set_openblas_threads(int threads) {
  const std::lock_guard lock(g_mutex);
  const OpenBlas* open = g_open.load(std::memory_order_relaxed);
  if (open != nullptr) {
    open->set_num_threads(threads);
    threads = open->get_num_threads();
  }
  g_threads = threads;
  return threads;
}

int openblas_threads() {
  const int t = g_threads;
  return t > 0 ? t : openblas().get_num_threads();
}

}  // namespace dpg
