#include "runtime/core/dynlib.h"

#include <dlfcn.h>

#include "runtime/core/error.h"

namespace dpg {

void* open_library(const char* soname, const char* package) {
  void* lib = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = ::dlerror();
    fail(Code::unavailable, std::string("cannot load ") + soname + ": " +
                                (e != nullptr ? e : "unknown reason") + " (Debian's " + package +
                                ", which this build of dpgossip was made with)");
  }
  return lib;
}

void* library_symbol(void* library, const char* soname, const char* name) {
  ::dlerror();
  void* f = ::dlsym(library, name);
  if (f == nullptr) fail(Code::unavailable, std::string(soname) + " has no " + name);
  return f;
}

}  // namespace dpg
