// NUMA binding's plan (placement/numa_plan.h) on simulated machines, against torchrun's rules
// (torch/numa/binding.py): two sockets with GPUs in and out of socket order, a GPU on a CPU-less
// memory node, a restricted cpuset, SMT siblings divided by exclusive mode, last-level cache
// groups for core-complex mode. tests/launcher/numa_oracle.py runs binding.py itself on sysfs
// trees of the same shapes and compares; here the expected sets are written out. The reader
// (placement/numa_topology.h) is tested on a small sysfs tree.
#include "placement/numa_plan.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "placement/cpu_list.h"
#include "placement/numa_topology.h"
#include "temp_dir.h"

namespace {

using namespace ddprun::launcher;
using ddprun::test::TempDir;
using ddprun::test::writeFile;

CpuSet cpus(const std::string& list) { return parseCpuList(list).value(); }

// A machine built up node by node.
struct Machine {
  CpuTopology topology;

  // A node's CPUs on one socket; each CPU's core siblings are itself and itself + smtOffset
  // (0: no SMT); its last-level cache is the block of `cacheCores` cores (with their siblings).
  Machine& node(int index, const std::string& list, int package, int smtOffset = 0,
                int cacheCores = 0) {
    topology.nodes[index].cpus = cpus(list);
    for (int cpu : topology.nodes[index].cpus) {
      CpuFacts& facts = topology.cpus[cpu];
      facts.package = package;
      const int core = smtOffset > 0 && cpu >= smtOffset ? cpu - smtOffset : cpu;
      facts.threadSiblings = smtOffset > 0 ? CpuSet{core, core + smtOffset} : CpuSet{cpu};
      if (cacheCores > 0) {
        CpuSet cache;
        const int first = core / cacheCores * cacheCores;
        for (int c = first; c < first + cacheCores; ++c) {
          cache.insert(c);
          if (smtOffset > 0) cache.insert(c + smtOffset);
        }
        facts.lastLevelCache = cache;
      }
      topology.allowed.insert(cpu);
    }
    return *this;
  }
  Machine& memoryNode(int index) {
    topology.nodes[index];
    return *this;
  }
  Machine& distance(int from, std::map<int, int> row) {
    topology.nodes[from].distance = std::move(row);
    return *this;
  }
  Machine& gpus(const std::vector<int>& nodes) {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      topology.gpus.push_back({address(i), nodes[i]});
    }
    return *this;
  }
  Machine& allow(const std::string& list) {
    topology.allowed = cpus(list);
    return *this;
  }
  static std::string address(std::size_t i) {
    return "0000:" + std::string(1, "123456789abcdef"[i]) + "0:00.0";
  }
};

// Two sockets, one node each, 8 cores with 2 threads (Linux numbering: siblings 16 apart), two
// last-level caches of 4 cores per socket; 4 GPUs on the nodes given.
Machine twoSockets(const std::vector<int>& gpuNodes) {
  Machine m;
  m.node(0, "0-7,16-23", 0, 16, 4).node(1, "8-15,24-31", 1, 16, 4);
  m.distance(0, {{0, 10}, {1, 21}}).distance(1, {{0, 21}, {1, 10}});
  m.gpus(gpuNodes);
  return m;
}

std::vector<std::string> planned(const Machine& m, NumaAffinity mode, int ranks) {
  std::vector<std::string> lists;
  for (const WorkerCpus& w : planNumaBinding(m.topology, mode, ranks)) {
    lists.push_back(cpuListText(w.cpus));
  }
  return lists;
}

using Lists = std::vector<std::string>;

TEST_CASE("numa plan: two sockets, GPUs in socket order", "[numa]") {
  const Machine m = twoSockets({0, 0, 1, 1});
  CHECK(planned(m, NumaAffinity::kNode, 4) ==
        Lists{"0-7,16-23", "0-7,16-23", "8-15,24-31", "8-15,24-31"});
  CHECK(planned(m, NumaAffinity::kSocket, 4) ==
        Lists{"0-7,16-23", "0-7,16-23", "8-15,24-31", "8-15,24-31"});
  // Each node's 8 physical cores halved between its 2 GPUs, every core with its sibling.
  CHECK(planned(m, NumaAffinity::kExclusive, 4) ==
        Lists{"0-3,16-19", "4-7,20-23", "8-11,24-27", "12-15,28-31"});
  CHECK(planned(m, NumaAffinity::kCoreComplex, 4) ==
        Lists{"0-3,16-19", "4-7,20-23", "8-11,24-27", "12-15,28-31"});
}

TEST_CASE("numa plan: GPUs out of socket order follow their own node", "[numa]") {
  const Machine m = twoSockets({1, 0, 1, 0});
  CHECK(planned(m, NumaAffinity::kNode, 4) ==
        Lists{"8-15,24-31", "0-7,16-23", "8-15,24-31", "0-7,16-23"});
  // GPUs 0 and 2 share node 1, in index order; GPUs 1 and 3 node 0.
  CHECK(planned(m, NumaAffinity::kExclusive, 4) ==
        Lists{"8-11,24-27", "0-3,16-19", "12-15,28-31", "4-7,20-23"});
  CHECK(planned(m, NumaAffinity::kCoreComplex, 4) ==
        Lists{"8-11,24-27", "0-3,16-19", "12-15,28-31", "4-7,20-23"});
}

TEST_CASE("numa plan: fewer local ranks than GPUs bind the first GPUs", "[numa]") {
  const Machine m = twoSockets({1, 0, 1, 0});
  // GPU 2 is on node 1 too, so GPU 0 still gets half of node 1 (as binding.py counts every GPU).
  CHECK(planned(m, NumaAffinity::kExclusive, 1) == Lists{"8-11,24-27"});
}

TEST_CASE("numa plan: a GPU on a CPU-less memory node binds to the nearest node with CPUs",
          "[numa]") {
  Machine m;
  m.node(0, "0-15", 0).node(1, "16-31", 1).memoryNode(2).memoryNode(3);
  m.distance(0, {{0, 10}, {1, 40}, {2, 80}, {3, 80}});
  m.distance(1, {{0, 40}, {1, 10}, {2, 80}, {3, 80}});
  m.distance(2, {{0, 80}, {1, 40}, {2, 10}, {3, 80}});  // node 2's memory sits by socket 1
  m.distance(3, {{0, 40}, {1, 80}, {2, 80}, {3, 10}});
  m.gpus({2, 3});
  const auto plan = planNumaBinding(m.topology, NumaAffinity::kNode, 2);
  REQUIRE(plan.size() == 2);
  CHECK(plan[0].gpuNode == 2);
  CHECK(plan[0].node == 1);
  CHECK(cpuListText(plan[0].cpus) == "16-31");
  CHECK(cpuListText(plan[1].cpus) == "0-15");
  CHECK(bindingLine(plan[0], NumaAffinity::kNode) ==
        "numa: local rank 0 (GPU 0000:10:00.0, node 2 without allowed CPUs: nearest node 1) "
        "bound to CPUs 16-31 (node mode)");
  // Socket mode leaves the memory nodes out (binding.py fails on them: min() of no CPU).
  CHECK(planned(m, NumaAffinity::kSocket, 2) == Lists{"16-31", "0-15"});

  SECTION("equally near nodes: the lower index") {
    m.distance(2, {{0, 40}, {1, 40}, {2, 10}, {3, 80}});
    CHECK(planned(m, NumaAffinity::kNode, 1) == Lists{"0-15"});
  }
}

TEST_CASE("numa plan: a restricted cpuset narrows every mode", "[numa]") {
  Machine m = twoSockets({0, 0, 1, 1});
  m.allow("0-3,16-19,8-11,24-27");
  CHECK(planned(m, NumaAffinity::kNode, 4) ==
        Lists{"0-3,16-19", "0-3,16-19", "8-11,24-27", "8-11,24-27"});
  // The allowed physical cores (4 per node) are divided, not the node's 8.
  CHECK(planned(m, NumaAffinity::kExclusive, 4) ==
        Lists{"0-1,16-17", "2-3,18-19", "8-9,24-25", "10-11,26-27"});

  SECTION("a node the cpuset leaves out: its GPUs bind to the nearest allowed node") {
    m.allow("0-7,16-23");
    CHECK(planned(m, NumaAffinity::kNode, 4) ==
          Lists{"0-7,16-23", "0-7,16-23", "0-7,16-23", "0-7,16-23"});
    CHECK(planned(m, NumaAffinity::kSocket, 4) ==
          Lists{"0-7,16-23", "0-7,16-23", "0-7,16-23", "0-7,16-23"});
    // Four GPUs now share node 0: two cores each.
    CHECK(planned(m, NumaAffinity::kExclusive, 4) ==
          Lists{"0-1,16-17", "2-3,18-19", "4-5,20-21", "6-7,22-23"});
  }
}

TEST_CASE("numa plan: exclusive mode gives the lower GPUs the cores left over", "[numa]") {
  Machine m;
  m.node(0, "0-9", 0, 5).gpus({0, 0, 0});  // 5 cores, siblings 5 apart, 3 GPUs
  CHECK(planned(m, NumaAffinity::kExclusive, 3) == Lists{"0-1,5-6", "2-3,7-8", "4,9"});

  SECTION("fewer physical cores than GPUs: refused") {
    Machine small;
    small.node(0, "0-3", 0, 2).gpus({0, 0, 0});
    CHECK_THROWS_WITH(planNumaBinding(small.topology, NumaAffinity::kExclusive, 3),
                      Catch::Contains("NUMA node 0 has 2 physical cores this agent may use and 3 "
                                      "GPUs"));
  }
}

TEST_CASE("numa plan: core-complex mode prefers the fullest last-level caches", "[numa]") {
  Machine m;
  // One socket, two nodes of 16 cores, a last-level cache per 4 cores; CPUs 0-1 not allowed.
  m.node(0, "0-15", 0, 0, 4).node(1, "16-31", 0, 0, 4).allow("2-31");
  m.gpus({0, 0, 0, 1, 1});
  // Node 0's caches by size then first CPU: 4-7, 8-11, 12-15, then 2-3 (two allowed CPUs).
  CHECK(planned(m, NumaAffinity::kCoreComplex, 5) ==
        Lists{"4-7", "8-11", "12-15", "16-19", "20-23"});
  CHECK(planned(m, NumaAffinity::kSocket, 1) == Lists{"2-31"});

  SECTION("more GPUs than caches: they wrap around") {
    Machine wrap;
    wrap.node(0, "0-7", 0, 0, 4).gpus({0, 0, 0});
    CHECK(planned(wrap, NumaAffinity::kCoreComplex, 3) == Lists{"0-3", "4-7", "0-3"});
  }
}

TEST_CASE("numa plan: a GPU without NUMA information is on node 0", "[numa]") {
  Machine m;
  m.node(0, "0-3", 0).gpus({-1});
  const auto plan = planNumaBinding(m.topology, NumaAffinity::kNode, 1);
  CHECK(plan.at(0).gpuNode == 0);
  CHECK(bindingLine(plan.at(0), NumaAffinity::kNode) ==
        "numa: local rank 0 (GPU 0000:10:00.0, node 0) bound to CPUs 0-3 (node mode)");
}

TEST_CASE("numa plan: what cannot be planned says why", "[numa]") {
  Machine m;
  m.node(0, "0-3", 0);
  CHECK_THROWS_WITH(planNumaBinding(m.topology, NumaAffinity::kNode, 1),
                    Catch::StartsWith("no GPU is visible"));
  m.gpus({0});
  CHECK_THROWS_WITH(planNumaBinding(m.topology, NumaAffinity::kNode, 2),
                    Catch::StartsWith("local rank 1 has no GPU of its own: 1 visible"));
  CHECK_THROWS_WITH(planNumaBinding(m.topology, NumaAffinity::kCoreComplex, 1),
                    Catch::Contains("core-complex mode needs CPU 0's caches"));
  m.topology.cpus[0].threadSiblings.reset();
  CHECK_THROWS_WITH(planNumaBinding(m.topology, NumaAffinity::kExclusive, 1),
                    Catch::Contains("exclusive mode needs CPU 0's physical core"));
  m.allow("8");
  CHECK_THROWS_WITH(planNumaBinding(m.topology, NumaAffinity::kNode, 1),
                    Catch::StartsWith("no NUMA node has a CPU this agent may use"));
  CHECK(planNumaBinding(m.topology, NumaAffinity::kNone, 1).empty());
}

TEST_CASE("numa plan: CPU lists read and written as the kernel does", "[numa]") {
  CHECK(parseCpuList("0-3,8,10-11\n") == CpuSet{0, 1, 2, 3, 8, 10, 11});
  CHECK(parseCpuList("\n") == CpuSet{});
  CHECK_FALSE(parseCpuList("3-1"));
  CHECK_FALSE(parseCpuList("a"));
  CHECK(cpuListText({0, 1, 2, 4, 6, 7}) == "0-2,4,6-7");
  CHECK(cpuListText({}).empty());
}

// A sysfs tree with what readCpuTopology reads.
struct SysfsTree {
  TempDir dir;
  std::string root = dir.path + "/sys";
  void put(const std::string& path, const std::string& text) { writeFile(root + "/" + path, text); }
  void pci(const std::string& address, const std::string& vendor, const std::string& cls,
           const std::string& node) {
    put("bus/pci/devices/" + address + "/vendor", vendor + "\n");
    put("bus/pci/devices/" + address + "/class", cls + "\n");
    put("bus/pci/devices/" + address + "/numa_node", node + "\n");
  }
};

TEST_CASE("numa topology: read from a sysfs tree", "[numa]") {
  SysfsTree t;
  t.put("devices/system/node/possible", "0-2\n");
  t.put("devices/system/node/online", "0-2\n");
  t.put("devices/system/node/node0/cpulist", "0-1\n");
  t.put("devices/system/node/node0/distance", "10 21 40\n");
  t.put("devices/system/node/node1/cpulist", "2-3\n");
  t.put("devices/system/node/node2/cpulist", "\n");  // memory only
  for (int cpu = 0; cpu < 4; ++cpu) {
    const std::string dir = "devices/system/cpu/cpu" + std::to_string(cpu) + "/";
    t.put(dir + "topology/physical_package_id", cpu < 2 ? "0\n" : "1\n");
    t.put(dir + "topology/thread_siblings_list", std::to_string(cpu) + "\n");
    t.put(dir + "cache/index0/type", "Data\n");
    t.put(dir + "cache/index0/level", "1\n");
    t.put(dir + "cache/index0/shared_cpu_list", std::to_string(cpu) + "\n");
    t.put(dir + "cache/index1/type", "Instruction\n");
    t.put(dir + "cache/index1/level", "3\n");  // an instruction cache never counts
    t.put(dir + "cache/index1/shared_cpu_list", "0-3\n");
    t.put(dir + "cache/index2/type", "Unified\n");
    t.put(dir + "cache/index2/level", "2\n");
    t.put(dir + "cache/index2/shared_cpu_list", cpu < 2 ? "0-1\n" : "2-3\n");
  }
  t.pci("0000:b1:00.0", "0x10de", "0x030200", "1");
  t.pci("0000:17:00.0", "0x10de", "0x030000", "0");
  t.pci("0000:18:00.0", "0x10de", "0x068000", "0");  // an NVSwitch bridge: not a GPU
  t.pci("0000:19:00.1", "0x10de", "0x040300", "0");  // a GPU's audio function
  t.pci("0000:20:00.0", "0x8086", "0x030000", "0");  // another vendor's display
  t.pci("0000:ca:00.0", "0x10de", "0x030200", "-1");

  const CpuTopology topology = readCpuTopology(t.root, {0, 1, 2, 3}, std::nullopt);
  REQUIRE(topology.gpus.size() == 3);
  CHECK(topology.gpus[0].pciAddress == "0000:17:00.0");
  CHECK(topology.gpus[1].pciAddress == "0000:b1:00.0");
  CHECK(topology.gpus[1].numaNode == 1);
  CHECK(topology.gpus[2].numaNode == -1);
  CHECK(topology.nodes.size() == 3);
  CHECK(topology.nodes.at(2).cpus.empty());
  CHECK(topology.nodes.at(0).distance == std::map<int, int>{{0, 10}, {1, 21}, {2, 40}});
  CHECK(topology.cpus.at(3).package == 1);
  CHECK(topology.cpus.at(3).lastLevelCache == CpuSet{2, 3});

  SECTION("CUDA_VISIBLE_DEVICES picks and orders the GPUs, up to its first invalid entry") {
    const auto visible = readCpuTopology(t.root, {0}, std::string("2,0,7,1")).gpus;
    REQUIRE(visible.size() == 2);
    CHECK(visible[0].pciAddress == "0000:ca:00.0");
    CHECK(visible[1].pciAddress == "0000:17:00.0");
    CHECK(readCpuTopology(t.root, {0}, std::string("")).gpus.empty());
  }
  SECTION("GPUs named by UUID cannot be placed without NVML") {
    CHECK_THROWS_WITH(readCpuTopology(t.root, {0}, std::string("GPU-8f3c")),
                      Catch::Contains("give GPU indices instead"));
  }
  SECTION("no node list: the one file that must be there") {
    std::filesystem::remove(t.root + "/devices/system/node/possible");
    CHECK_THROWS_WITH(readCpuTopology(t.root, {0}, std::nullopt),
                      Catch::StartsWith("cannot read " + t.root + "/devices/system/node/possible"));
  }
}

}  // namespace
