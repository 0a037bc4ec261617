#include "placement/numa_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <iterator>
#include <map>

namespace ddprun::launcher {
namespace {

class Planner {
 public:
  Planner(const CpuTopology& topology, NumaAffinity mode) : topology_(topology), mode_(mode) {}

  WorkerCpus plan(int localRank) const {
    if (localRank >= static_cast<int>(topology_.gpus.size())) {
      throw NumaPlanError(fmt::format(
          "local rank {} has no GPU of its own: {} visible (PCI vendor 0x10de, display class, "
          "narrowed by CUDA_VISIBLE_DEVICES)",
          localRank, topology_.gpus.size()));
    }
    WorkerCpus binding;
    binding.localRank = localRank;
    binding.gpu = topology_.gpus[static_cast<std::size_t>(localRank)].pciAddress;
    binding.gpuNode = gpuNode(localRank);
    binding.node = boundNode(localRank);
    switch (mode_) {
      case NumaAffinity::kNode:
        binding.cpus = allowedOn(binding.node);
        break;
      case NumaAffinity::kSocket:
        binding.cpus = socketCpus(binding.node);
        break;
      case NumaAffinity::kExclusive:
        binding.cpus = exclusiveCpus(localRank, binding.node);
        break;
      case NumaAffinity::kCoreComplex:
        binding.cpus = coreComplexCpus(localRank, binding.node);
        break;
      case NumaAffinity::kNone:
        break;
    }
    if (binding.cpus.empty()) {
      throw NumaPlanError(fmt::format("local rank {}: no CPU to bind to", localRank));
    }
    return binding;
  }

 private:
  int gpuNode(int gpu) const {
    // Firmware without NUMA information writes -1: one node, 0.
    return std::max(topology_.gpus[static_cast<std::size_t>(gpu)].numaNode, 0);
  }

  CpuSet allowedOn(int node) const {
    CpuSet cpus;
    if (auto it = topology_.nodes.find(node); it != topology_.nodes.end()) {
      std::set_intersection(it->second.cpus.begin(), it->second.cpus.end(),
                            topology_.allowed.begin(), topology_.allowed.end(),
                            std::inserter(cpus, cpus.end()));
    }
    return cpus;
  }

  // The GPU's node, or when no allowed CPU is on it, the nearest node with one.
  int boundNode(int gpu) const {
    const int node = gpuNode(gpu);
    if (!allowedOn(node).empty()) return node;
    std::map<int, int> noDistances;
    const auto it = topology_.nodes.find(node);
    const std::map<int, int>& distance =
        it == topology_.nodes.end() ? noDistances : it->second.distance;
    int best = -1;
    int bestDistance = INT_MAX;
    for (const auto& [candidate, facts] : topology_.nodes) {
      if (allowedOn(candidate).empty()) continue;
      const auto d = distance.find(candidate);
      const int dist = d == distance.end() ? INT_MAX - 1 : d->second;
      if (best < 0 || dist < bestDistance) {
        best = candidate;
        bestDistance = dist;
      }
    }
    if (best < 0) {
      throw NumaPlanError(
          fmt::format("no NUMA node has a CPU this agent may use (allowed CPUs: {})",
                      topology_.allowed.empty() ? "none" : cpuListText(topology_.allowed)));
    }
    return best;
  }

  const CpuFacts& cpu(int index) const {
    static const CpuFacts kUnknown;
    auto it = topology_.cpus.find(index);
    return it == topology_.cpus.end() ? kUnknown : it->second;
  }

  int socketOf(int node) const {
    const int first = *allowedOn(node).begin();
    const auto& package = cpu(first).package;
    if (!package) {
      throw NumaPlanError(
          fmt::format("socket mode needs CPU {}'s socket, and sysfs gives no "
                      "devices/system/cpu/cpu{}/topology/physical_package_id",
                      first, first));
    }
    return *package;
  }

  CpuSet socketCpus(int node) const {
    const int socket = socketOf(node);
    CpuSet cpus;
    for (const auto& [other, facts] : topology_.nodes) {
      const CpuSet allowed = allowedOn(other);
      if (allowed.empty() || socketOf(other) != socket) continue;
      cpus.insert(allowed.begin(), allowed.end());
    }
    return cpus;
  }

  // The GPUs bound near `node`, in index order, and where `gpu` is among them.
  int positionOnNode(int gpu, int node, int* count) const {
    int position = 0;
    *count = 0;
    for (int other = 0; other < static_cast<int>(topology_.gpus.size()); ++other) {
      if (boundNode(other) != node) continue;
      if (other < gpu) ++position;
      ++*count;
    }
    return position;
  }

  // The allowed CPUs of `node` grouped by the lowest CPU of what `groupOf` says each shares.
  template <typename GroupOf>
  std::map<int, CpuSet> groups(int node, GroupOf groupOf) const {
    std::map<int, CpuSet> grouped;
    for (int index : allowedOn(node)) {
      const CpuSet& group = groupOf(index);
      grouped[group.empty() ? index : *group.begin()].insert(index);
    }
    return grouped;
  }

  CpuSet exclusiveCpus(int gpu, int node) const {
    const auto cores = groups(node, [this](int index) -> const CpuSet& {
      const auto& siblings = cpu(index).threadSiblings;
      if (!siblings) {
        throw NumaPlanError(
            fmt::format("exclusive mode needs CPU {}'s physical core, and sysfs gives no "
                        "devices/system/cpu/cpu{}/topology/thread_siblings_list",
                        index, index));
      }
      return *siblings;
    });
    int gpus = 0;
    const int position = positionOnNode(gpu, node, &gpus);
    const int each = static_cast<int>(cores.size()) / gpus;
    const int extra = static_cast<int>(cores.size()) % gpus;
    if (each < 1) {
      throw NumaPlanError(fmt::format(
          "exclusive mode: NUMA node {} has {} physical cores this agent may use and {} GPUs; "
          "each GPU needs one",
          node, cores.size(), gpus));
    }
    const int start = position * each + std::min(position, extra);
    const int end = start + each + (position < extra ? 1 : 0);
    CpuSet cpus;
    auto core = std::next(cores.begin(), start);
    for (int i = start; i < end; ++i, ++core) cpus.insert(core->second.begin(), core->second.end());
    return cpus;
  }

  CpuSet coreComplexCpus(int gpu, int node) const {
    const auto caches = groups(node, [this](int index) -> const CpuSet& {
      const auto& shared = cpu(index).lastLevelCache;
      if (!shared || shared->empty()) {
        throw NumaPlanError(fmt::format(
            "core-complex mode needs CPU {}'s caches, and sysfs gives no data or unified cache "
            "under devices/system/cpu/cpu{}/cache",
            index, index));
      }
      return *shared;
    });
    std::vector<std::pair<int, CpuSet>> ordered(caches.begin(), caches.end());
    std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
      return a.second.size() > b.second.size();  // ties keep the lower first CPU first
    });
    int gpus = 0;
    const int position = positionOnNode(gpu, node, &gpus);
    return ordered[static_cast<std::size_t>(position) % ordered.size()].second;
  }

  const CpuTopology& topology_;
  NumaAffinity mode_;
};

}  // namespace

std::vector<WorkerCpus> planNumaBinding(const CpuTopology& topology, NumaAffinity mode,
                                        int localWorldSize) {
  std::vector<WorkerCpus> plan;
  if (mode == NumaAffinity::kNone) return plan;
  if (topology.gpus.empty()) {
    throw NumaPlanError(
        "no GPU is visible (no NVIDIA display or 3D controller under /sys/bus/pci/devices, or "
        "CUDA_VISIBLE_DEVICES lists none), and a worker is bound near the GPU of its local rank");
  }
  const Planner planner(topology, mode);
  for (int rank = 0; rank < localWorldSize; ++rank) plan.push_back(planner.plan(rank));
  return plan;
}

std::string bindingLine(const WorkerCpus& binding, NumaAffinity mode) {
  const std::string where = binding.node == binding.gpuNode
                                ? fmt::format("node {}", binding.node)
                                : fmt::format("node {} without allowed CPUs: nearest node {}",
                                              binding.gpuNode, binding.node);
  return fmt::format("numa: local rank {} (GPU {}, {}) bound to CPUs {} ({} mode)",
                     binding.localRank, binding.gpu, where, cpuListText(binding.cpus),
                     numaAffinityName(mode));
}

}  // namespace ddprun::launcher
