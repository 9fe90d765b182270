#include "runtime/core/blas.h"

#include <mutex>

#include "runtime/core/dynlib.h"

namespace dpg {
namespace {

std::mutex g_mutex;            // the count below and whether the library is open
int g_threads = 0;             // 0: OpenBLAS's own default
const OpenBlas* g_open = nullptr;

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
  static const OpenBlas table = load();
  const std::lock_guard lock(g_mutex);
  if (g_open == nullptr) {
    if (g_threads > 0) table.set_num_threads(g_threads);
    g_open = &table;
  }
  return table;
}

int set_openblas_threads(int threads) {
  const std::lock_guard lock(g_mutex);
  g_threads = threads;
  if (g_open == nullptr) return threads;
  g_open->set_num_threads(threads);
  return g_open->get_num_threads();
}

}  // namespace dpg
