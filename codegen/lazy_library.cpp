#include "codegen/lazy_library.h"

#include <dlfcn.h>
#include <mutex>

#include "ir/error.h"

namespace fusec {

void* LazyLibrary::open() {
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  if (handle_) return handle_;
  void* h = dlopen(soname_, RTLD_NOW | RTLD_LOCAL);
  if (!h && fallback_ && *fallback_) h = dlopen(fallback_, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = dlerror();
    throw Error(std::string("cannot load ") + soname_ + " (" + (why ? why : "not found") +
                "): install the CUDA toolkit's libraries or put them on LD_LIBRARY_PATH");
  }
  return handle_ = h;
}

void* LazyLibrary::symbol(const char* name) {
  void* h = open();
  void* f = dlsym(h, name);
  if (!f) throw Error(std::string(soname_) + " has no " + name + ": it is older than the CUDA toolkit fusec was built with");
  return f;
}

}  // namespace fusec
