#include "health/nvml_checks.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <string_view>
#include <vector>

#include "core/cuda_visible_devices.h"
#include "core/file_text.h"
#include "ddprun/common/text.h"
#include "ddprun/common/worker_env_names.h"

namespace ddprun::launcher {
namespace {

// NVML's ABI, as much of it as the checks use (nvml.h is not needed to build ddprun).
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlNotSupported = 3;
constexpr NvmlReturn kNvmlInsufficientSize = 7;
constexpr int kNvmlMemoryErrorUncorrected = 1;
constexpr int kNvmlVolatileEcc = 0;

// nvmlProcessInfo_v2_t: what nvmlDeviceGetComputeRunningProcesses_v2 and _v3 fill.
struct NvmlProcessInfo {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// The most GPU processes one query lists.
constexpr unsigned kMaxGpuProcesses = 256;
// How much of a process's environment is read to find its DDPRUN_AGENT.
constexpr std::size_t kEnvironReadLimit = 1 << 20;

template <typename Function>
Function symbol(void* handle, const char* name) {
  return reinterpret_cast<Function>(::dlsym(handle, name));
}

}  // namespace

struct NvmlChecks::Api {
  void* handle = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*errorString)(NvmlReturn) = nullptr;
  NvmlReturn (*count)(unsigned*) = nullptr;
  NvmlReturn (*byIndex)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*byUuid)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*pendingRetirement)(NvmlDevice, int*) = nullptr;
  NvmlReturn (*eccErrors)(NvmlDevice, int, int, unsigned long long*) = nullptr;
  NvmlReturn (*processes)(NvmlDevice, unsigned*, NvmlProcessInfo*) = nullptr;

  ~Api() {
    if (shutdown) shutdown();
    if (handle) ::dlclose(handle);
  }
  std::string text(NvmlReturn code) const {
    const char* said = errorString ? errorString(code) : nullptr;
    return said ? fmt::format("{} (NVML error {})", common::printable(said), code)
                : fmt::format("NVML error {}", code);
  }
};

NvmlChecks::NvmlChecks(std::string library) : library_(std::move(library)) {}
NvmlChecks::~NvmlChecks() = default;

bool NvmlChecks::available() const { return api_ != nullptr; }

namespace {

// Whether `pid`'s environment holds DDPRUN_AGENT=`marker` (a worker of this agent, or a process
// one started).
bool startedByThisAgent(unsigned pid, const std::string& marker) {
  if (marker.empty()) return false;
  const auto environ =
      readFileText(fmt::format("/proc/{}/environ", pid), nullptr, kEnvironReadLimit);
  if (!environ) return false;
  const std::string wanted = fmt::format("{}={}", common::kEnvDdprunAgent, marker);
  std::string_view rest = *environ;
  while (!rest.empty()) {
    const auto end = rest.find('\0');
    if (rest.substr(0, end) == wanted) return true;
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  return false;
}

}  // namespace

std::optional<HealthVerdict> NvmlChecks::check(const std::optional<std::string>& cudaVisibleDevices,
                                               const std::string& agentMarker) {
  if (!tried_) {
    tried_ = true;
    void* handle = ::dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      spdlog::debug("health gate: no {} here: no GPU checks", library_);
      return std::nullopt;
    }
    auto api = std::make_unique<Api>();
    api->handle = handle;
    api->init = symbol<decltype(api->init)>(handle, "nvmlInit_v2");
    api->errorString = symbol<decltype(api->errorString)>(handle, "nvmlErrorString");
    api->count = symbol<decltype(api->count)>(handle, "nvmlDeviceGetCount_v2");
    api->byIndex = symbol<decltype(api->byIndex)>(handle, "nvmlDeviceGetHandleByIndex_v2");
    api->byUuid = symbol<decltype(api->byUuid)>(handle, "nvmlDeviceGetHandleByUUID");
    api->pendingRetirement =
        symbol<decltype(api->pendingRetirement)>(handle, "nvmlDeviceGetRetiredPagesPendingStatus");
    api->eccErrors = symbol<decltype(api->eccErrors)>(handle, "nvmlDeviceGetTotalEccErrors");
    api->processes =
        symbol<decltype(api->processes)>(handle, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (api->processes == nullptr) {
      api->processes =
          symbol<decltype(api->processes)>(handle, "nvmlDeviceGetComputeRunningProcesses_v2");
    }
    if (api->init == nullptr || api->count == nullptr || api->byIndex == nullptr) {
      spdlog::warn("health gate: {} lacks NVML's basic functions: no GPU checks", library_);
      return std::nullopt;
    }
    if (const NvmlReturn status = api->init(); status != kNvmlSuccess) {
      spdlog::info("health gate: NVML did not initialise ({}): no GPU checks", api->text(status));
      api->init = nullptr;
      return std::nullopt;
    }
    api->shutdown = symbol<decltype(api->shutdown)>(handle, "nvmlShutdown");
    api_ = std::move(api);
  }
  if (!api_) return std::nullopt;
  const Api& api = *api_;
  unsigned physical = 0;
  if (const NvmlReturn status = api.count(&physical); status != kNvmlSuccess) {
    return HealthVerdict::fail("gpus", "NVML cannot count the GPUs: " + api.text(status));
  }
  const auto visible = visibleDevices(cudaVisibleDevices, static_cast<int>(physical));
  for (std::size_t cuda = 0; cuda < visible.size(); ++cuda) {
    const VisibleDevice& gpu = visible[cuda];
    const std::string name = gpu.index >= 0 ? fmt::format("gpu {}", gpu.index)
                                            : fmt::format("gpu {}", common::printable(gpu.uuid));
    NvmlDevice device = nullptr;
    NvmlReturn status = kNvmlNotSupported;
    if (gpu.index >= 0) {
      status = api.byIndex(static_cast<unsigned>(gpu.index), &device);
    } else if (api.byUuid != nullptr) {
      status = api.byUuid(gpu.uuid.c_str(), &device);
    }
    if (status != kNvmlSuccess) {
      return HealthVerdict::fail(name, "NVML cannot reach it: " + api.text(status));
    }
    if (api.pendingRetirement != nullptr) {
      int pending = 0;
      status = api.pendingRetirement(device, &pending);
      if (status != kNvmlSuccess && status != kNvmlNotSupported) {
        return HealthVerdict::fail(name, "its state cannot be read: " + api.text(status));
      }
      if (status == kNvmlSuccess && pending != 0) {
        return HealthVerdict::fail(name,
                                   "it has memory pages pending retirement (a GPU reset is due)");
      }
    }
    if (api.eccErrors != nullptr) {
      unsigned long long errors = 0;
      status = api.eccErrors(device, kNvmlMemoryErrorUncorrected, kNvmlVolatileEcc, &errors);
      if (status != kNvmlSuccess && status != kNvmlNotSupported) {
        return HealthVerdict::fail(name, "its ECC state cannot be read: " + api.text(status));
      }
      if (status == kNvmlSuccess && errors > 0) {
        return HealthVerdict::fail(
            name,
            fmt::format("it reports {} uncorrectable ECC error(s) since its last reset", errors));
      }
    }
    if (api.processes != nullptr) {
      std::vector<NvmlProcessInfo> found(kMaxGpuProcesses);
      unsigned count = kMaxGpuProcesses;
      status = api.processes(device, &count, found.data());
      if (status != kNvmlSuccess && status != kNvmlNotSupported &&
          status != kNvmlInsufficientSize) {
        return HealthVerdict::fail(name, "its processes cannot be listed: " + api.text(status));
      }
      if (status == kNvmlSuccess) {
        for (unsigned i = 0; i < count && i < kMaxGpuProcesses; ++i) {
          if (startedByThisAgent(found[i].pid, agentMarker)) {
            return HealthVerdict::fail(
                name, fmt::format("process {}, left by an earlier round of this agent, still "
                                  "holds it",
                                  found[i].pid));
          }
        }
      }
    }
  }
  return std::nullopt;
}

}  // namespace ddprun::launcher
