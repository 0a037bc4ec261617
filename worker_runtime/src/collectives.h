// Collectives: the interface each backend (Gloo, NCCL) implements behind
// ddprun::runtime::ProcessGroup. ProcessGroup checks arguments and tracks the broken state; an
// implementation only moves bytes and turns its library's failures into RuntimeError.
#pragma once

#include <cstddef>
#include <memory>

#include "bootstrap.h"
#include "ddprun/runtime/process_group.h"

namespace ddprun::runtime::detail {

// Thread safety: none; ProcessGroup calls one method at a time, from one thread at a time.
class Collectives {
 public:
  virtual ~Collectives() = default;

  virtual BackendKind kind() const = 0;
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

std::unique_ptr<Collectives> makeGlooCollectives(const RuntimeOptions& options,
                                                 Bootstrap bootstrap);

// Whether this build has NCCL, and (when it has) why it cannot be used here; empty when it can.
bool builtWithNccl();
std::string ncclUnusableReason();
std::unique_ptr<Collectives> makeNcclCollectives(const RuntimeOptions& options,
                                                 Bootstrap bootstrap);

// Whether `pointer` is CUDA device memory the CPU cannot read (managed memory it can). Never
// creates a CUDA context: false unless the process has loaded the CUDA driver; always false in a
// build without CUDA (device_memory.cc, nccl_unavailable.cc).
bool isDeviceMemory(const void* pointer);

}  // namespace ddprun::runtime::detail
