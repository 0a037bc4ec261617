// What the command line asks of the host: the file system, CPU and GPU counts, and name
// resolution. Checked while parsing so that a bad path or host name is reported up front, not
// minutes later when the rendezvous first connects.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/given_values.h"
#include "cli/helpers.h"

namespace ddprun::launcher::cli_detail {

bool pathExists(const std::string& path);
bool isDirectory(const std::string& path);
// `path` made absolute against the working directory (as given if that fails).
std::string absolutePath(const std::string& path);

int cpuCount();

// The NVIDIA kernel driver lists one directory per GPU here; reading it needs neither CUDA nor
// NVML, so ddprun does not link either.
inline constexpr const char* kNvidiaGpusDir = "/proc/driver/nvidia/gpus";
int physicalNvidiaGpuCount();
// The NVIDIA GPUs CUDA would enumerate in this environment (CUDA_VISIBLE_DEVICES).
int visibleNvidiaGpuCount(const Environment& environment);
// How many of `physicalGpus` NVIDIA GPUs CUDA would enumerate under CUDA_VISIBLE_DEVICES
// (nothing = unset): core/cuda_visible_devices.h reads the list.
int visibleGpuCount(int physicalGpus, const std::optional<std::string>& cudaVisibleDevices);
// Intel GPUs (torch's "xpu") as DRM render nodes with Intel's PCI vendor id; ZE_AFFINITY_MASK
// narrows them down the way Level Zero does (approximately: one entry per device).
int visibleIntelGpuCount(const Environment& environment);

// Whether `host` is an address literal or a name that resolves now.
bool resolvesNow(std::string_view host);
// Numeric addresses are accepted without a lookup; names must resolve now. Throws UsageError
// naming `source`.
void checkResolvable(std::string_view host, const GivenValue& source);
// The rendezvous store's host (c10d endpoint, static master): a name that does not resolve yet is
// a warning, not an error, since the agent waits for it (Membership::open); a Kubernetes pod's
// service name appears seconds after the pod. Said up front so that a typo is seen at once.
void warnIfUnresolved(std::string_view host, const GivenValue& source,
                      std::vector<std::string>& warnings);

// --log-dir: need not exist (the agent creates it), but must be creatable. Throws UsageError.
void checkLogDir(const GivenValue& given);

}  // namespace ddprun::launcher::cli_detail
