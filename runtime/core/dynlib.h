// Shared libraries opened at their first use (dlopen) rather than linked: for what most dpgossip
// processes never call (oneDNN's GEMM where nothing trains, LAPACK's spectra where no graph is
// analysed), so that those processes neither map nor relocate them at every start.
#pragma once

#include <string>

namespace dpg {

// The library `soname` (found as the dynamic loader finds any: its cache, LD_LIBRARY_PATH),
// opened once for the process's life with every symbol resolved (RTLD_NOW). Throws unavailable
// naming `soname`, the loader's reason and `package` (the Debian package that provides it).
void* open_library(const char* soname, const char* package);

// The function `name` of a library open_library() returned, cast to F. Throws unavailable naming
// both when the library has no such symbol.
void* library_symbol(void* library, const char* soname, const char* name);
template <class F> F library_function(void* library, const char* soname, const char* name) {
  return reinterpret_cast<F>(library_symbol(library, soname, name));
}

}  // namespace dpg
