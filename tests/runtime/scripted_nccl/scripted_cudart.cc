// A scripted CUDA runtime (libcudart's soname, see scripted.h): just the calls the runtime and
// its test workers make. Device memory is host memory tracked here, so that the scripted NCCL can
// refuse a host pointer the way a real GPU would fault on one; copies and streams run at once.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "scripted.h"

namespace {

std::mutex allocationsMutex;
std::map<const char*, std::size_t> allocations;  // base -> bytes
thread_local int currentDevice = 0;
thread_local cudaError_t lastError = cudaSuccess;

int deviceCount() {
  const char* text = std::getenv("DDPRUN_SCRIPTED_GPUS");
  return text != nullptr ? std::atoi(text) : 1;
}

cudaError_t fail(cudaError_t error) {
  lastError = error;
  return error;
}

}  // namespace

extern "C" {

void scriptedLog(const char* format, ...) {
  const char* path = std::getenv("DDPRUN_SCRIPTED_NCCL_LOG");
  if (path == nullptr) return;
  char text[512];
  va_list arguments;
  va_start(arguments, format);
  std::vsnprintf(text, sizeof(text), format, arguments);
  va_end(arguments);
  // One write of a whole line with O_APPEND: lines of concurrent ranks do not interleave.
  if (FILE* log = std::fopen(path, "a")) {
    std::fprintf(log, "%d %s\n", static_cast<int>(::getpid()), text);
    std::fclose(log);
  }
}

bool scriptedIsDeviceMemory(const void* pointer, std::size_t bytes) {
  const char* p = static_cast<const char*>(pointer);
  const std::lock_guard<std::mutex> lock(allocationsMutex);
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin()) return false;
  --it;
  return p + bytes <= it->first + it->second;
}

int scriptedCurrentDevice() { return currentDevice; }

cudaError_t cudaGetDeviceCount(int* count) {
  *count = deviceCount();
  return *count > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaGetDevice(int* device) {
  *device = currentDevice;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= deviceCount()) return fail(cudaErrorInvalidDevice);
  currentDevice = device;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t error = lastError;
  lastError = cudaSuccess;
  return error;
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected (scripted)";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal (scripted)";
    case cudaErrorInvalidValue:
      return "invalid argument (scripted)";
    default:
      return "scripted CUDA error";
  }
}

cudaError_t cudaMalloc(void** pointer, std::size_t bytes) {
  // 256-byte aligned, as cudaMalloc's memory is.
  void* memory = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (memory == nullptr) return fail(cudaErrorMemoryAllocation);
  const std::lock_guard<std::mutex> lock(allocationsMutex);
  allocations[static_cast<const char*>(memory)] = bytes;
  *pointer = memory;
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;
  const std::lock_guard<std::mutex> lock(allocationsMutex);
  if (allocations.erase(static_cast<const char*>(pointer)) == 0) return fail(cudaErrorInvalidValue);
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* pointer) {
  *attributes = cudaPointerAttributes{};
  // As CUDA 11 and later: an ordinary host pointer is "unregistered", not an error.
  attributes->type =
      scriptedIsDeviceMemory(pointer, 1) ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
  attributes->device = currentDevice;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind) {
  std::memmove(destination, source, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* destination, const void* source, std::size_t bytes,
                            cudaMemcpyKind, cudaStream_t stream) {
  if (stream != nullptr && stream != cudaStreamLegacy && stream->hung) {
    // Work queued behind a kernel that never ends never runs either.
    return cudaSuccess;
  }
  std::memmove(destination, source, bytes);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  *stream = new CUstream_st;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy) return cudaSuccess;
  if (stream->hung) return cudaErrorNotReady;
  if (stream->notReadyPolls > 0) {
    --stream->notReadyPolls;
    return cudaErrorNotReady;
  }
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  // Events carry no state here: every stream runs its work at once.
  *event = reinterpret_cast<cudaEvent_t>(new char);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<char*>(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }

cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return cudaSuccess; }

}  // extern "C"
