// NUMA binding: which CPUs each local rank's worker runs on, decided from the machine's topology
// (numa_topology.h) as torchrun 2.9+ decides it (torch/numa/binding.py): the worker of local rank
// i is bound near GPU i (CUDA's index), intersected with the CPUs the agent may use.
//   node          the allowed CPUs of the GPU's NUMA node;
//   socket        the allowed CPUs of every node on the socket of that node (a node's socket is
//                 the package of its lowest allowed CPU);
//   exclusive     that node's physical cores (grouped by thread siblings, ordered by their lowest
//                 CPU) divided among the node's GPUs in index order, the lower GPUs taking one
//                 more when they do not divide evenly; every sibling of a core goes with it;
//   core-complex  one group of the node's allowed CPUs sharing a last-level cache: groups ordered
//                 by size (largest first), then lowest CPU; the node's j-th GPU takes group
//                 j mod count.
// Where binding.py gives a set, this gives the same set (tests/launcher/numa_oracle.py compares
// them). Where it raises, two cases bind instead of failing (docs/numa.md): a GPU whose node has
// no allowed CPU (a GPU's own memory node, a node outside the cpuset) is placed on the nearest
// node that has some, by the nodes' distance table (lowest index on a tie), and is counted among
// that node's GPUs; and socket mode leaves out the nodes without an allowed CPU.
//
// Pure: no file, no clock. Thread-safe (no state).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "ddprun/launcher/launch_config.h"
#include "placement/cpu_list.h"
#include "placement/numa_topology.h"

namespace ddprun::launcher {

// One local rank's binding.
struct WorkerCpus {
  int localRank = 0;
  std::string gpu;  // the GPU's PCI address
  int gpuNode = 0;  // its NUMA node (sysfs's -1 read as 0, as binding.py does)
  int node = 0;     // the node it is bound near: gpuNode, or the nearest one with allowed CPUs
  CpuSet cpus;      // never empty
};

// The binding cannot be planned: no GPU for a local rank, no allowed CPU anywhere, fewer physical
// cores than GPUs on a node, sysfs lacking what the mode needs. what(): one line, the problem.
class NumaPlanError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The binding of local ranks 0 .. localWorldSize-1. Throws NumaPlanError.
std::vector<WorkerCpus> planNumaBinding(const CpuTopology& topology, NumaAffinity mode,
                                        int localWorldSize);

// "numa: local rank 3 (GPU 0000:41:00.0, node 1) bound to CPUs 16-31,48-63 (node mode)".
std::string bindingLine(const WorkerCpus& binding, NumaAffinity mode);

}  // namespace ddprun::launcher
