// The interface each collective backend (Gloo, NCCL) implements behind ddprun::ProcessGroup.
// ProcessGroup checks arguments and tracks the broken state; a backend only moves bytes and
// turns its library's failures into RuntimeError.
#pragma once

#include <cstddef>
#include <memory>

#include "bootstrap.h"
#include "ddprun/runtime/process_group.h"

namespace ddprun::detail {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual ddprun::Backend kind() const = 0;
  virtual int rank() const = 0;
  virtual int worldSize() const = 0;
  virtual int device() const { return -1; }

  virtual void allReduce(void* data, std::size_t count, DataType type, ReduceOp op) = 0;
  virtual void broadcast(void* data, std::size_t count, DataType type, int root) = 0;
  virtual void allGather(const void* input, void* output, std::size_t count, DataType type) = 0;
  virtual void barrier() = 0;
  // Releases the connections without waiting on peers. Called once.
  virtual void shutdown() = 0;
};

std::unique_ptr<Backend> makeGlooBackend(const RuntimeOptions& options, Bootstrap bootstrap);

// Whether this build has NCCL, and (when it has) why it cannot be used here; empty when it can.
bool builtWithNccl();
std::string ncclUnusableReason();
std::unique_ptr<Backend> makeNcclBackend(const RuntimeOptions& options, Bootstrap bootstrap);

// Whether `pointer` is CUDA device memory the CPU cannot read (managed memory it can). Never
// creates a CUDA context: false unless the process has loaded the CUDA driver; always false in a
// build without CUDA (device_memory.cc, nccl_unavailable.cc).
bool isDeviceMemory(const void* pointer);

}  // namespace ddprun::detail
