#include "placement/numa_topology.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <string_view>

#include "core/cuda_visible_devices.h"
#include "core/file_text.h"

namespace ddprun::launcher {
namespace {

namespace fs = std::filesystem;

// sysfs attributes are a line; this bounds a file that is not.
constexpr std::size_t kAttributeLimit = 64 * 1024;

std::optional<std::string> attribute(const fs::path& path) {
  return readFileText(path.string(), nullptr, kAttributeLimit);
}

std::string required(const fs::path& path) {
  std::string why;
  auto text = readFileText(path.string(), &why, kAttributeLimit);
  if (!text) throw TopologyError(fmt::format("cannot read {}: {}", path.string(), why));
  return *text;
}

std::string_view trimmed(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\n");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\n") - first + 1);
}

std::optional<int> integer(std::string_view text) {
  text = trimmed(text);
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

CpuSet cpuList(const fs::path& path, const std::string& text) {
  auto cpus = parseCpuList(text);
  if (!cpus) throw TopologyError(fmt::format("{} is not a CPU list: '{}'", path.string(), text));
  return *cpus;
}

std::optional<CpuSet> optionalCpuList(const fs::path& path) {
  auto text = attribute(path);
  if (!text) return std::nullopt;
  return cpuList(path, *text);
}

// The highest-level data or unified cache's shared_cpu_list, as binding.py picks it (the first
// index directory at that level).
std::optional<CpuSet> lastLevelCache(const fs::path& cacheDir) {
  std::error_code error;
  std::vector<std::pair<int, fs::path>> indices;
  for (fs::directory_iterator it(cacheDir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with("index")) continue;
    if (auto k = integer(std::string_view(name).substr(5)); k && *k >= 0) {
      indices.emplace_back(*k, it->path());
    }
  }
  if (indices.empty()) return std::nullopt;
  std::sort(indices.begin(), indices.end());
  int maxLevel = -1;
  CpuSet shared;
  for (const auto& [k, dir] : indices) {
    const std::string type(trimmed(required(dir / "type")));
    if (type != "Unified" && type != "Data") continue;
    const auto level = integer(required(dir / "level"));
    if (!level) throw TopologyError(fmt::format("{} is not a number", (dir / "level").string()));
    if (*level <= maxLevel) continue;
    maxLevel = *level;
    shared = cpuList(dir / "shared_cpu_list", required(dir / "shared_cpu_list"));
  }
  return shared;
}

std::map<int, NumaNodeFacts> readNodes(const fs::path& nodeDir) {
  const CpuSet possible = cpuList(nodeDir / "possible", required(nodeDir / "possible"));
  // A node's distance row lists the online nodes in ascending order.
  const auto online = optionalCpuList(nodeDir / "online").value_or(possible);
  std::map<int, NumaNodeFacts> nodes;
  for (int node : possible) {
    NumaNodeFacts& facts = nodes[node];
    const fs::path dir = nodeDir / fmt::format("node{}", node);
    facts.cpus = optionalCpuList(dir / "cpulist").value_or(CpuSet{});  // offline: no CPUs
    if (auto row = attribute(dir / "distance")) {
      auto to = online.begin();
      std::string_view rest = trimmed(*row);
      while (!rest.empty() && to != online.end()) {
        const auto blank = rest.find_first_of(" \t");
        if (auto d = integer(rest.substr(0, blank))) facts.distance[*to] = *d;
        ++to;
        rest = blank == std::string_view::npos ? std::string_view() : trimmed(rest.substr(blank));
      }
    }
  }
  return nodes;
}

CpuFacts readCpu(const fs::path& cpuDir) {
  CpuFacts facts;
  if (auto package = attribute(cpuDir / "topology" / "physical_package_id")) {
    facts.package = integer(*package);
  }
  facts.threadSiblings = optionalCpuList(cpuDir / "topology" / "thread_siblings_list");
  facts.lastLevelCache = lastLevelCache(cpuDir / "cache");
  return facts;
}

// NVIDIA display and 3D controllers in PCI bus id order.
std::vector<GpuDevice> readGpus(const fs::path& pciDir) {
  std::vector<GpuDevice> gpus;
  std::error_code error;
  for (fs::directory_iterator it(pciDir, error), end; !error && it != end; it.increment(error)) {
    const auto vendor = attribute(it->path() / "vendor");
    const auto pciClass = attribute(it->path() / "class");
    if (!vendor || trimmed(*vendor) != "0x10de" || !pciClass) continue;
    const std::string_view cls = trimmed(*pciClass);
    if (!cls.starts_with("0x0300") && !cls.starts_with("0x0302")) continue;
    GpuDevice gpu{it->path().filename().string(), -1};
    if (auto node = attribute(it->path() / "numa_node")) gpu.numaNode = integer(*node).value_or(-1);
    gpus.push_back(std::move(gpu));
  }
  // Fixed-width lowercase hex (domain:bus:device.function): text order is bus id order.
  std::sort(gpus.begin(), gpus.end(),
            [](const GpuDevice& a, const GpuDevice& b) { return a.pciAddress < b.pciAddress; });
  return gpus;
}

std::vector<GpuDevice> visibleGpus(std::vector<GpuDevice> all,
                                   const std::optional<std::string>& cudaVisibleDevices) {
  if (!cudaVisibleDevices) return all;
  std::vector<GpuDevice> visible;
  for (const auto& device : visibleDevices(cudaVisibleDevices, static_cast<int>(all.size()))) {
    if (device.index < 0) {
      throw TopologyError(fmt::format(
          "CUDA_VISIBLE_DEVICES names GPUs by UUID ('{}'), which ddprun cannot match to a PCI "
          "address without NVML; give GPU indices instead",
          device.uuid));
    }
    visible.push_back(all[static_cast<std::size_t>(device.index)]);
  }
  return visible;
}

}  // namespace

CpuTopology readCpuTopology(const std::string& sysRoot, CpuSet allowed,
                            const std::optional<std::string>& cudaVisibleDevices) {
  const fs::path root(sysRoot);
  CpuTopology topology;
  topology.nodes = readNodes(root / "devices" / "system" / "node");
  for (const auto& [node, facts] : topology.nodes) {
    for (int cpu : facts.cpus) {
      topology.cpus[cpu] = readCpu(root / "devices" / "system" / "cpu" / fmt::format("cpu{}", cpu));
    }
  }
  topology.gpus = visibleGpus(readGpus(root / "bus" / "pci" / "devices"), cudaVisibleDevices);
  topology.allowed = std::move(allowed);
  return topology;
}

CpuSet allowedCpus() {
  CpuSet cpus;
  // Grows until the kernel's mask fits (EINVAL: the set is smaller than the kernel's).
  for (int size = CPU_SETSIZE; size <= (1 << 20); size *= 2) {
    cpu_set_t* mask = CPU_ALLOC(size);
    const std::size_t bytes = CPU_ALLOC_SIZE(size);
    CPU_ZERO_S(bytes, mask);
    if (::sched_getaffinity(0, bytes, mask) == 0) {
      for (int cpu = 0; cpu < size; ++cpu) {
        if (CPU_ISSET_S(cpu, bytes, mask)) cpus.insert(cpu);
      }
      CPU_FREE(mask);
      return cpus;
    }
    CPU_FREE(mask);
    if (errno != EINVAL) break;
  }
  return cpus;
}

}  // namespace ddprun::launcher
