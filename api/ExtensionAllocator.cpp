// The Python extension allocates with mimalloc, as the CLI does (tools/CMakeLists.txt): glibc's
// malloc made an in-memory prediction ~1.25x slower than the same passes in the CLI. A process's
// malloc belongs to the interpreter, so only this extension's C++ allocations move:
// - operator new/delete are replaced here, and the extension links libstdc++ statically and
//   exports nothing but its module initialiser (api/CMakeLists.txt, ExtensionExports.map), so every
//   std:: container of the extension allocates and frees through these;
// - mimalloc is opened with dlopen(RTLD_LOCAL), not linked: libmimalloc.so exports operator
//   new/delete of its own, and as a dependency of the extension it would interpose them on the
//   other shared libraries loaded with it (simdjson's static objects were then freed by mimalloc
//   after it had shut down, at interpreter exit). Opened apart, only mi_* is looked up in it;
//   without it (a machine without libmimalloc.so.2) the extension allocates with malloc;
// - memory the extension receives from shared libraries (a std::string libfmt formats, simdjson's
//   buffers) was allocated by glibc: delete hands a pointer mimalloc does not own back to free().
#include <dlfcn.h>

#include <cstdlib>
#include <new>

namespace {

struct Mimalloc {
  void *(*malloc)(std::size_t) = nullptr;
  void *(*mallocAligned)(std::size_t, std::size_t) = nullptr;
  void (*free)(void *) = nullptr;
  bool (*owns)(const void *) = nullptr;
};

Mimalloc open() {
  Mimalloc m;
  void *library = dlopen("libmimalloc.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!library)
    return m;
  m.malloc = reinterpret_cast<void *(*)(std::size_t)>(dlsym(library, "mi_malloc"));
  m.mallocAligned = reinterpret_cast<void *(*)(std::size_t, std::size_t)>(dlsym(library, "mi_malloc_aligned"));
  m.free = reinterpret_cast<void (*)(void *)>(dlsym(library, "mi_free"));
  m.owns = reinterpret_cast<bool (*)(const void *)>(dlsym(library, "mi_is_in_heap_region"));
  if (!m.malloc || !m.mallocAligned || !m.free || !m.owns)
    return Mimalloc{};
  return m;
}

const Mimalloc &mimalloc() {
  static const Mimalloc m = open();
  return m;
}

void *allocate(std::size_t n, std::size_t alignment = 0) noexcept {
  const Mimalloc &m = mimalloc();
  if (n == 0)
    n = 1;
  if (alignment > __STDCPP_DEFAULT_NEW_ALIGNMENT__) // aligned_alloc wants a multiple of the alignment
    return m.mallocAligned ? m.mallocAligned(n, alignment)
                           : std::aligned_alloc(alignment, (n + alignment - 1) / alignment * alignment);
  return m.malloc ? m.malloc(n) : std::malloc(n);
}

void *allocateOrThrow(std::size_t n, std::size_t alignment = 0) {
  void *p = allocate(n, alignment);
  if (!p)
    throw std::bad_alloc();
  return p;
}

void release(void *p) noexcept {
  const Mimalloc &m = mimalloc();
  if (m.owns && m.owns(p))
    m.free(p);
  else
    std::free(p);
}

} // namespace

void *operator new(std::size_t n) { return allocateOrThrow(n); }
void *operator new[](std::size_t n) { return allocateOrThrow(n); }
void *operator new(std::size_t n, const std::nothrow_t &) noexcept { return allocate(n); }
void *operator new[](std::size_t n, const std::nothrow_t &) noexcept { return allocate(n); }
void *operator new(std::size_t n, std::align_val_t a) { return allocateOrThrow(n, static_cast<std::size_t>(a)); }
void *operator new[](std::size_t n, std::align_val_t a) { return allocateOrThrow(n, static_cast<std::size_t>(a)); }
void *operator new(std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept {
  return allocate(n, static_cast<std::size_t>(a));
}
void *operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept {
  return allocate(n, static_cast<std::size_t>(a));
}
void operator delete(void *p) noexcept { release(p); }
void operator delete[](void *p) noexcept { release(p); }
void operator delete(void *p, std::size_t) noexcept { release(p); }
void operator delete[](void *p, std::size_t) noexcept { release(p); }
void operator delete(void *p, const std::nothrow_t &) noexcept { release(p); }
void operator delete[](void *p, const std::nothrow_t &) noexcept { release(p); }
void operator delete(void *p, std::align_val_t) noexcept { release(p); }
void operator delete[](void *p, std::align_val_t) noexcept { release(p); }
void operator delete(void *p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete[](void *p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept { release(p); }
void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept { release(p); }
