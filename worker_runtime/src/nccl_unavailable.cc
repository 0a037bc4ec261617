// The NCCL and CUDA entry points of a build without CUDA/NCCL: the backend reports itself
// unusable, and no pointer can be device memory.
#include "collectives.h"

namespace ddprun::runtime::detail {

bool builtWithNccl() { return false; }

std::string ncclUnusableReason() {
  return "this build of ddprun has no NCCL (CUDA/NCCL not found)";
}

std::unique_ptr<Collectives> makeNcclCollectives(const RuntimeOptions&, Bootstrap) {
  throw RuntimeError(RuntimeError::Kind::kUnavailable, ncclUnusableReason());
}

bool isDeviceMemory(const void*) { return false; }

}  // namespace ddprun::runtime::detail
