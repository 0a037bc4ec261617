// What NUMA binding needs to know about this machine (numa_plan.h decides from it): the NUMA
// nodes with their CPUs and distances, each CPU's socket, physical core and last-level cache, the
// GPUs in CUDA's order with the node of each, and the CPUs the agent may run on.
//
// Read from sysfs under a root given by the caller ("/sys" on a real machine; tests give a
// simulated tree), the paths torch/numa/binding.py reads:
//   devices/system/node/possible, online       the node indices
//   devices/system/node/nodeN/cpulist, distance
//   devices/system/cpu/cpuN/topology/physical_package_id, thread_siblings_list
//   devices/system/cpu/cpuN/cache/indexK/{type,level,shared_cpu_list}
//   bus/pci/devices/ADDRESS/{vendor,class,numa_node}
// binding.py asks CUDA for GPU i's PCI address; the agent has no CUDA, so the GPUs are the PCI
// functions with NVIDIA's vendor id (0x10de) and a display class (VGA 0x0300 or 3D 0x0302), in
// PCI bus id order: CUDA's order with CUDA_DEVICE_ORDER=PCI_BUS_ID, and its default order
// (fastest first, ties in bus id order) on a node of identical GPUs. CUDA_VISIBLE_DEVICES, as
// indices, picks and orders them as CUDA does.
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "placement/cpu_list.h"

namespace ddprun::launcher {

struct NumaNodeFacts {
  CpuSet cpus;                  // cpulist (empty: a memory-only node, e.g. a GPU's memory)
  std::map<int, int> distance;  // to each node, from the node's distance row
};

// What sysfs says of one logical CPU; nothing where the file is missing.
struct CpuFacts {
  std::optional<int> package;            // physical_package_id: the socket
  std::optional<CpuSet> threadSiblings;  // the logical CPUs of its physical core
  std::optional<CpuSet> lastLevelCache;  // the CPUs sharing its highest data/unified cache
};

struct GpuDevice {
  std::string pciAddress;  // "0000:41:00.0"
  int numaNode = -1;       // the PCI device's numa_node (-1: the firmware did not say)
};

struct CpuTopology {
  std::map<int, NumaNodeFacts> nodes;  // every possible node
  std::map<int, CpuFacts> cpus;        // every CPU of a node
  std::vector<GpuDevice> gpus;         // CUDA's order: gpus[i] is cuda:i
  CpuSet allowed;                      // where the agent may run (its affinity, its cpuset)
};

// Something the binding needs is missing or not what the kernel writes: what() names the file.
class TopologyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads the topology under `sysRoot`. `allowed` is where the agent may run (allowedCpus()).
// `cudaVisibleDevices` (nothing: unset) is read as CUDA reads it, up to its first entry that is not
// the index of a GPU not already listed. Throws TopologyError for a file that cannot be read or
// parsed (a missing optional one is left empty) and for CUDA_VISIBLE_DEVICES naming GPUs by
// UUID, which cannot be matched to a PCI address without NVML.
CpuTopology readCpuTopology(const std::string& sysRoot, CpuSet allowed,
                            const std::optional<std::string>& cudaVisibleDevices);

// The calling thread's CPU affinity (sched_getaffinity): its cpuset narrowed by any taskset.
CpuSet allowedCpus();

}  // namespace ddprun::launcher
