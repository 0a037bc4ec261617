// Shared by the scripted CUDA runtime and the scripted NCCL (tests/runtime/scripted_nccl): what a
// stream is, and where the two log what the runtime did with them.
//
// These two libraries stand in for libcudart and libnccl (same sonames, found first through
// LD_LIBRARY_PATH) so that the NCCL backend's own logic -- polling a non-blocking communicator,
// timeouts, aborting, staging host buffers, the unique id's namespacing -- runs on a machine
// without a GPU. "Device memory" is host memory the scripted cudaMalloc handed out; a stream runs
// everything at once unless the script says it hangs. They prove what the backend does with
// NCCL's documented behaviour, not NCCL itself: that is tests/runtime/gpu_test.sh on a GPU.
//
// Environment (read by the scripted NCCL):
//   DDPRUN_SCRIPTED_NCCL      ok (default) | init-hang | hang-at:K | remote-error-at:K |
//                             finalize-hang      (K counts collectives from 1, barrier included;
//                             the script plays in attempt 0 only: a restarted group runs clean)
//   DDPRUN_SCRIPTED_GPUS      how many GPUs cudaGetDeviceCount reports (default 1)
//   DDPRUN_SCRIPTED_NCCL_LOG  a file each library appends one line per event to
#pragma once

#include <atomic>
#include <cstddef>

// The definition behind cudaStream_t (struct CUstream_st*), allocated by the scripted runtime.
struct CUstream_st {
  std::atomic<int> notReadyPolls{0};  // cudaStreamQuery answers "not ready" this many times more
  std::atomic<bool> hung{false};      // a kernel that never ends (a peer that never answers)
};

extern "C" {
// Appends "<pid> <text>" as one line to $DDPRUN_SCRIPTED_NCCL_LOG (if set).
__attribute__((visibility("default"))) void scriptedLog(const char* format, ...)
    __attribute__((format(printf, 1, 2)));
// Whether [pointer, pointer + bytes) lies inside one scripted cudaMalloc allocation.
__attribute__((visibility("default"))) bool scriptedIsDeviceMemory(const void* pointer,
                                                                   std::size_t bytes);
// The device current on the calling thread (cudaSetDevice).
__attribute__((visibility("default"))) int scriptedCurrentDevice();
}
