// The NVIDIA GPUs CUDA would enumerate under CUDA_VISIBLE_DEVICES: the one reader of that list
// for the launcher's counts (--nproc-per-node gpu) and the health gate's NVML checks.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddprun::launcher {

// One visible GPU, as CUDA_VISIBLE_DEVICES names it: an index among the physical GPUs, or a
// GPU-/MIG- UUID (not checked against the devices: that needs NVML).
struct VisibleGpu {
  int index = -1;    // -1: named by `uuid`
  std::string uuid;  // "GPU-..." or "MIG-..."
};

// The visible GPUs of `physicalGpus`, in CUDA's order (nothing = CUDA_VISIBLE_DEVICES unset:
// every one). Like the CUDA runtime, the list is read up to its first invalid entry (an index out
// of range, a repeated index, anything that is neither an index nor a GPU-/MIG- UUID), and never
// holds more entries than there are physical GPUs.
std::vector<VisibleGpu> visibleGpus(int physicalGpus,
                                    const std::optional<std::string>& cudaVisibleDevices);

}  // namespace ddprun::launcher
