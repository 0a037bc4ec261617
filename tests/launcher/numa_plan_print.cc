// Test tool: ddprun's NUMA plan (placement/numa_plan.h) for a simulated sysfs tree, without
// launching anything, for tests/launcher/numa_oracle.py to compare with torch's binding.py.
//
// Usage: numa_plan_print SYSFS_ROOT MODE LOCAL_WORLD_SIZE ALLOWED_CPUS [CUDA_VISIBLE_DEVICES]
// Prints "RANK NODE CPULIST" per local rank and exits 0, or "error: WHY" and exits 1.
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>

#include "ddprun/launcher/launch_config.h"
#include "placement/cpu_list.h"
#include "placement/numa_plan.h"
#include "placement/numa_topology.h"

int main(int argc, char** argv) {
  using namespace ddprun::launcher;
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr,
                 "usage: numa_plan_print SYSFS_ROOT MODE LOCAL_WORLD_SIZE ALLOWED_CPUS "
                 "[CUDA_VISIBLE_DEVICES]\n");
    return 2;
  }
  const std::string modeName = argv[2];
  NumaAffinity mode = NumaAffinity::kNone;
  for (NumaAffinity m : {NumaAffinity::kNode, NumaAffinity::kSocket, NumaAffinity::kExclusive,
                         NumaAffinity::kCoreComplex}) {
    if (modeName == numaAffinityName(m)) mode = m;
  }
  const auto allowed = parseCpuList(argv[4]);
  if (mode == NumaAffinity::kNone || !allowed) {
    std::fprintf(stderr, "numa_plan_print: bad mode or CPU list\n");
    return 2;
  }
  const std::optional<std::string> visible =
      argc == 6 ? std::optional<std::string>(argv[5]) : std::nullopt;
  try {
    const auto plan =
        planNumaBinding(readCpuTopology(argv[1], *allowed, visible), mode, std::stoi(argv[3]));
    for (const WorkerCpus& binding : plan) {
      std::printf("%d %d %s\n", binding.localRank, binding.node, cpuListText(binding.cpus).c_str());
    }
  } catch (const std::runtime_error& error) {
    std::printf("error: %s\n", error.what());
    return 1;
  }
  return 0;
}
