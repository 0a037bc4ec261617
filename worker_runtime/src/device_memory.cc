// isDeviceMemory for a build with CUDA: whether a pointer is GPU memory the CPU cannot read.
//
// It asks the CUDA driver (cuPointerGetAttributes) only if the process has already loaded it: a
// program that never touched CUDA cannot hold device memory, and the runtime API's
// cudaPointerGetAttributes would create a CUDA context on the current GPU as a side effect, which
// a Gloo rank on a GPU host must not pay for (memory on GPU 0, startup time) on every collective.
#include <cuda.h>
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "collectives.h"

namespace ddprun::runtime::detail {
namespace {

using PointerGetAttributes = CUresult (*)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr);

// The number of objects the dynamic linker has loaded so far (dl_phdr_info::dlpi_adds): it
// changes only when a library is loaded, so an unchanged count means "still no libcuda" without
// asking the loader again (a failed dlopen searches the file system: ~20 syscalls a call).
unsigned long long loadsSoFar() {
  unsigned long long adds = 0;
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        *static_cast<unsigned long long*>(out) = info->dlpi_adds;
        return 1;  // the first object carries the count: stop there
      },
      &adds);
  return adds;
}

// The driver's entry point once some library (the CUDA runtime, usually) has loaded libcuda;
// null until then. The handle is kept open, so the function stays valid.
PointerGetAttributes loadedDriver() {
  static std::atomic<PointerGetAttributes> cached{nullptr};
  static std::atomic<unsigned long long> loadsWhenAbsent{0};
  if (PointerGetAttributes found = cached.load(std::memory_order_acquire)) return found;
  const unsigned long long loads = loadsSoFar();
  if (loads == loadsWhenAbsent.load(std::memory_order_relaxed)) return nullptr;
  void* library = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  void* symbol = library != nullptr ? ::dlsym(library, "cuPointerGetAttributes") : nullptr;
  if (symbol == nullptr) {
    if (library != nullptr) ::dlclose(library);
    loadsWhenAbsent.store(loads, std::memory_order_relaxed);
    return nullptr;
  }
  const auto found = reinterpret_cast<PointerGetAttributes>(symbol);
  cached.store(found, std::memory_order_release);
  return found;
}

}  // namespace

bool isDeviceMemory(const void* pointer) {
  const PointerGetAttributes getAttributes = loadedDriver();
  if (getAttributes == nullptr) return false;
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                      CU_POINTER_ATTRIBUTE_IS_MANAGED};
  unsigned int memoryType = 0;
  unsigned int managed = 0;
  void* data[] = {&memoryType, &managed};
  const auto address = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(pointer));
  // Not a CUDA pointer (or a driver without CUDA initialized): an error or a zero memory type.
  if (getAttributes(2, attributes, data, address) != CUDA_SUCCESS) return false;
  // Managed memory is readable from the CPU.
  return memoryType == CU_MEMORYTYPE_DEVICE && managed == 0;
}

}  // namespace ddprun::runtime::detail
