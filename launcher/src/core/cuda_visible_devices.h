// CUDA_VISIBLE_DEVICES as the CUDA runtime reads it: one reader for every place that needs to know
// which GPUs a process will see (the worker count of --nproc-per-node gpu, NUMA binding by GPU,
// the health gate's GPUs).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddprun::launcher {

inline constexpr const char* kCudaVisibleDevices = "CUDA_VISIBLE_DEVICES";

// One device the mask selects: a physical index, or a GPU-/MIG- UUID (index -1), which only NVML
// could match to a device.
struct VisibleDevice {
  int index = -1;
  std::string uuid;
};

// The devices `mask` selects out of `physicalGpus`, in the mask's order (nothing, the variable
// unset: every physical GPU, in index order). Like the CUDA runtime, the list is read up to its
// first invalid entry: an index out of range, a repeated index, anything that is neither an index
// nor a GPU-/MIG- UUID. Blanks around an entry are allowed. A UUID is taken to name a present
// device, and the list never holds more than `physicalGpus` entries.
std::vector<VisibleDevice> visibleDevices(const std::optional<std::string>& mask, int physicalGpus);

}  // namespace ddprun::launcher
