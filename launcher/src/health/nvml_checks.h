// The GPU part of the health gate: each GPU this node's workers would see, asked through NVML
// (libnvidia-ml.so.1, loaded at run time when present: ddprun links no NVIDIA library, and
// never runs nvidia-smi, whose exit status says nothing reliable). A GPU is sick when NVML
// cannot reach it (its handle or a state query fails: NVML_ERROR_GPU_IS_LOST, a fallen-off
// bus), when it has page retirements pending or volatile uncorrectable ECC errors (its memory
// is bad until a reset), or when a process left by an earlier round of this agent still holds
// it (a worker's orphan that escaped the stop: the next workers would share the GPU with it).
//
// Without the library, or when NVML does not initialise (no driver), there is nothing to check:
// no error. A query a GPU does not support (no ECC on a consumer card) is skipped.
//
// Thread safety: one object per agent, used on one thread at a time.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "health/health_gate.h"

namespace ddprun::launcher {

class NvmlChecks {
 public:
  // `library`: the name dlopen looks up (the tests' stand-in is found through LD_LIBRARY_PATH).
  explicit NvmlChecks(std::string library = "libnvidia-ml.so.1");
  ~NvmlChecks();
  NvmlChecks(const NvmlChecks&) = delete;
  NvmlChecks& operator=(const NvmlChecks&) = delete;

  // The first sick GPU of those CUDA_VISIBLE_DEVICES (`cudaVisibleDevices`, nothing = unset) lets
  // this node see, as a failure; nothing when all are well or NVML is not there. `agentMarker`:
  // DDPRUN_AGENT of this agent's workers (a GPU process with it in its environment is a
  // leftover of an earlier round).
  std::optional<HealthVerdict> check(const std::optional<std::string>& cudaVisibleDevices,
                                     const std::string& agentMarker);

  // Whether NVML was loaded and initialised (after the first check()).
  bool available() const;

 private:
  struct Api;
  std::string library_;
  bool tried_ = false;
  std::unique_ptr<Api> api_;
};

}  // namespace ddprun::launcher
