#!/usr/bin/env python3
"""ddprun's NUMA binding against torchrun's own algorithm: upstream torch/numa/binding.py (kept
byte for byte in tests/upstream/pytorch/) runs its own functions on simulated sysfs trees, and
ddprun's planner (through the test tool numa_plan_print) plans the same trees; every mode, layout
and local rank is compared.

binding.py reads the machine through a few names of its module: open() and os.listdir() on /sys,
os.sched_getaffinity(0), torch.cuda (GPU count and PCI address) and shutil.which("numactl"). Those
names are pointed at the simulated tree; the upstream file itself is not touched. The GPUs are
enumerated as CUDA does with CUDA_DEVICE_ORDER=PCI_BUS_ID: by PCI address.

Where binding.py gives a set for every local rank of a layout, ddprun's must be the same. Where
it raises for some rank (torchrun then fails to start the job), ddprun binds instead
(docs/numa.md, "Where torchrun fails"): those cases are listed in EXPECTED_DIVERGENT, so that a
new one fails this test.

Usage: numa_oracle.py NUMA_PLAN_PRINT [--markdown]   (--markdown: the table of docs/numa.md)
Runs under /usr/bin/python3 (torch 1.13: binding.py's signpost_event, new in torch 2, is stubbed).
"""
import importlib.util
import os
import pathlib
import subprocess
import sys
import tempfile
import types

REPO = pathlib.Path(__file__).resolve().parents[2]
UPSTREAM = REPO / "tests" / "upstream" / "pytorch" / "torch" / "numa" / "binding.py"
MODES = ["node", "socket", "exclusive", "core-complex"]


def smt_node(cores, smt_offset, cache_cores):
    """CPU facts of `cores` (physical core ids): each with its sibling core+smt_offset (0: no
    SMT), a last-level cache per `cache_cores` cores."""
    cpus = {}
    for core in cores:
        threads = [core] + ([core + smt_offset] if smt_offset else [])
        first = core // cache_cores * cache_cores
        cache = [c for k in range(first, first + cache_cores)
                 for c in ([k] + ([k + smt_offset] if smt_offset else []))]
        for cpu in threads:
            cpus[cpu] = {"siblings": threads, "cache": cache}
    return cpus


def layout(nodes, gpus, allowed=None, distance=None):
    """nodes: {node: (package, cpu facts)}; gpus: [(pci address, numa_node)]."""
    return {"nodes": nodes, "gpus": gpus, "allowed": allowed, "distance": distance or {}}


def two_sockets(gpus, allowed=None):
    return layout({0: (0, smt_node(range(0, 8), 16, 4)), 1: (1, smt_node(range(8, 16), 16, 4))},
                  gpus, allowed, {0: [10, 21], 1: [21, 10]})


LAYOUTS = {
    "two sockets, GPUs in socket order": two_sockets(
        [("0000:17:00.0", 0), ("0000:31:00.0", 0), ("0000:b1:00.0", 1), ("0000:ca:00.0", 1)]),
    "two sockets, GPUs out of socket order": two_sockets(
        [("0000:17:00.0", 1), ("0000:31:00.0", 0), ("0000:b1:00.0", 1), ("0000:ca:00.0", 0)]),
    "restricted cpuset (half of each node)": two_sockets(
        [("0000:17:00.0", 0), ("0000:31:00.0", 0), ("0000:b1:00.0", 1), ("0000:ca:00.0", 1)],
        allowed="0-3,8-11,16-19,24-27"),
    "cpuset without node 1": two_sockets(
        [("0000:17:00.0", 0), ("0000:31:00.0", 0), ("0000:b1:00.0", 1), ("0000:ca:00.0", 1)],
        allowed="0-7,16-23"),
    # Grace-like: two CPU nodes, and memory-only nodes (the GPUs' memory) in the node list.
    "CPU-less memory nodes, GPUs on CPU nodes": layout(
        {0: (0, smt_node(range(0, 16), 0, 8)), 1: (1, smt_node(range(16, 32), 0, 8)),
         2: (None, {}), 3: (None, {})},
        [("0008:01:00.0", 0), ("0009:01:00.0", 0), ("0018:01:00.0", 1), ("0019:01:00.0", 1)],
        distance={0: [10, 40, 80, 80], 1: [40, 10, 80, 80], 2: [80, 40, 10, 80],
                  3: [40, 80, 80, 10]}),
    "GPUs on CPU-less memory nodes": layout(
        {0: (0, smt_node(range(0, 16), 0, 8)), 1: (1, smt_node(range(16, 32), 0, 8)),
         2: (None, {}), 3: (None, {})},
        [("0008:01:00.0", 2), ("0018:01:00.0", 3)],
        distance={0: [10, 40, 80, 80], 1: [40, 10, 80, 80], 2: [80, 40, 10, 80],
                  3: [40, 80, 80, 10]}),
    "SMT, 5 cores for 3 GPUs": layout(
        {0: (0, smt_node(range(0, 5), 5, 5))},
        [("0000:01:00.0", 0), ("0000:02:00.0", 0), ("0000:03:00.0", 0)]),
    "L3 groups (4 cores), CPUs 0-1 not allowed": layout(
        {0: (0, smt_node(range(0, 16), 0, 4)), 1: (0, smt_node(range(16, 32), 0, 4))},
        [("0000:01:00.0", 0), ("0000:02:00.0", 0), ("0000:03:00.0", 0), ("0000:81:00.0", 1),
         ("0000:82:00.0", 1)],
        allowed="2-31", distance={0: [10, 12], 1: [12, 10]}),
    "one node, no NUMA information (-1)": layout(
        {0: (0, smt_node(range(0, 4), 4, 4))}, [("0000:01:00.0", -1), ("0000:02:00.0", -1)]),
}

# (layout, mode) where binding.py raises for some local rank and ddprun binds (docs/numa.md).
EXPECTED_DIVERGENT = {
    ("cpuset without node 1", "node"), ("cpuset without node 1", "socket"),
    ("cpuset without node 1", "exclusive"), ("cpuset without node 1", "core-complex"),
    ("CPU-less memory nodes, GPUs on CPU nodes", "socket"),
    ("GPUs on CPU-less memory nodes", "node"), ("GPUs on CPU-less memory nodes", "socket"),
    ("GPUs on CPU-less memory nodes", "exclusive"),
    ("GPUs on CPU-less memory nodes", "core-complex"),
}


def ranges(cpus):
    cpus = sorted(cpus)
    out, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


def parse(text):
    cpus = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        a, _, b = part.partition("-")
        cpus.update(range(int(a), int(b or a) + 1))
    return cpus


def write_tree(root, spec):
    """The sysfs files binding.py and ddprun read."""
    def put(path, text):
        p = root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")

    nodes = sorted(spec["nodes"])
    put("devices/system/node/possible", ranges(nodes))
    put("devices/system/node/online", ranges(nodes))
    for node, (package, cpus) in spec["nodes"].items():
        put(f"devices/system/node/node{node}/cpulist", ranges(cpus))
        row = spec["distance"].get(node) or [10 if n == node else 20 for n in nodes]
        put(f"devices/system/node/node{node}/distance", " ".join(map(str, row)))
        for cpu, facts in cpus.items():
            base = f"devices/system/cpu/cpu{cpu}"
            put(f"{base}/topology/physical_package_id", str(package))
            put(f"{base}/topology/thread_siblings_list", ranges(facts["siblings"]))
            caches = [("Data", 1, facts["siblings"]), ("Instruction", 1, facts["siblings"]),
                      ("Unified", 2, facts["siblings"]), ("Unified", 3, facts["cache"])]
            for k, (kind, level, shared) in enumerate(caches):
                put(f"{base}/cache/index{k}/type", kind)
                put(f"{base}/cache/index{k}/level", str(level))
                put(f"{base}/cache/index{k}/shared_cpu_list", ranges(shared))
    for address, node in spec["gpus"]:
        put(f"bus/pci/devices/{address}/vendor", "0x10de")
        put(f"bus/pci/devices/{address}/class", "0x030200")
        put(f"bus/pci/devices/{address}/numa_node", str(node))
    # An NVSwitch (NVIDIA, bridge class): not a GPU, for either side.
    put("bus/pci/devices/0000:05:00.0/vendor", "0x10de")
    put("bus/pci/devices/0000:05:00.0/class", "0x068000")
    put("bus/pci/devices/0000:05:00.0/numa_node", "0")


def all_cpus(spec):
    return {cpu for _, cpus in spec["nodes"].values() for cpu in cpus}


def load_upstream():
    import torch  # noqa: F401  torch 1.13: binding.py's signpost_event is a torch 2 addition
    import torch._utils_internal as internal
    if not hasattr(internal, "signpost_event"):
        internal.signpost_event = lambda *args, **kwargs: None
    spec = importlib.util.spec_from_file_location("upstream_numa_binding", UPSTREAM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def point_at(binding, sys_root, spec):
    """binding.py's view of the machine becomes the simulated tree."""
    def under(path):
        path = str(path)
        return str(sys_root) + path[len("/sys"):] if path.startswith("/sys/") else path

    allowed = parse(spec["allowed"]) if spec["allowed"] else all_cpus(spec)
    gpus = sorted(spec["gpus"])  # CUDA_DEVICE_ORDER=PCI_BUS_ID

    def properties(index):
        domain, bus, rest = gpus[index][0].split(":")
        return types.SimpleNamespace(pci_domain_id=int(domain, 16), pci_bus_id=int(bus, 16),
                                     pci_device_id=int(rest.split(".")[0], 16))

    binding.open = lambda path, *args, **kwargs: open(under(path), *args, **kwargs)
    binding.os = types.SimpleNamespace(listdir=lambda path: os.listdir(under(path)),
                                       path=os.path, sched_getaffinity=lambda pid: set(allowed))
    binding.torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
        device_count=lambda: len(gpus), get_device_properties=properties))
    binding.shutil = types.SimpleNamespace(which=lambda name: "/usr/bin/" + name)
    return allowed, len(gpus)


def upstream_plan(binding, mode, ranks):
    """Per local rank: the CPU list, or the exception binding.py raises."""
    options = binding.NumaOptions(affinity_mode=binding.AffinityMode(mode))
    out = []
    for rank in range(ranks):
        try:
            cpus = binding._get_validated_logical_cpus_to_bind_to(gpu_index=rank,
                                                                  numa_options=options)
            out.append(ranges(cpus))
        except Exception as error:  # what torchrun would raise at start
            out.append(f"raises {type(error).__name__}")
    return out


def ddprun_plan(tool, sys_root, mode, ranks, allowed):
    result = subprocess.run([tool, str(sys_root), mode, str(ranks), ranges(allowed)],
                            capture_output=True, text=True, timeout=30)
    lines = result.stdout.splitlines()
    if result.returncode != 0:
        return [lines[0] if lines else result.stderr.strip()] * ranks
    return [line.split(" ", 2)[2] for line in lines]


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    tool, markdown = sys.argv[1], "--markdown" in sys.argv[2:]
    try:
        binding = load_upstream()
    except ImportError as error:
        print(f"SKIP: binding.py cannot be loaded here ({error}); run under /usr/bin/python3",
              file=sys.stderr)
        return 77
    problems, divergent, rows = [], set(), []
    with tempfile.TemporaryDirectory(prefix="ddprun-numa-") as tmp:
        for index, (name, spec) in enumerate(LAYOUTS.items()):
            sys_root = pathlib.Path(tmp) / str(index) / "sys"
            write_tree(sys_root, spec)
            allowed, ranks = point_at(binding, sys_root, spec)
            for mode in MODES:
                theirs = upstream_plan(binding, mode, ranks)
                ours = ddprun_plan(tool, sys_root, mode, ranks, allowed)
                raised = any(t.startswith("raises") for t in theirs)
                if raised:
                    divergent.add((name, mode))
                    if any(o.startswith("error") for o in ours):
                        problems.append(f"{name}, {mode}: ddprun refused where a fallback was "
                                        f"expected: {ours[0]}")
                elif theirs != ours:
                    problems.append(f"{name}, {mode}: binding.py {theirs} != ddprun {ours}")
                for rank in range(ranks):
                    rows.append((name, mode, rank, theirs[rank], ours[rank]))
    if divergent != EXPECTED_DIVERGENT:
        problems.append(f"binding.py raised in {sorted(divergent - EXPECTED_DIVERGENT)} "
                        f"(unexpected) and not in {sorted(EXPECTED_DIVERGENT - divergent)}")
    if markdown:
        print("| layout | mode | local rank | binding.py | ddprun |")
        print("|---|---|---|---|---|")
        for name, mode, rank, theirs, ours in rows:
            same = "" if theirs == ours else " †"
            print(f"| {name} | {mode} | {rank} | {theirs} | {ours}{same} |")
    cases = {(r[0], r[1]) for r in rows}
    compared = [r for r in rows if (r[0], r[1]) not in divergent]
    print(f"{len(cases) - len(divergent)} (layout, mode) cases where binding.py binds every local "
          f"rank ({len(compared)} ranks): "
          f"{'all identical' if not problems else 'DIFFERENCES'}; {len(divergent)} where it raises "
          f"for some rank and ddprun binds ({len(rows) - len(compared)} ranks)", file=sys.stderr)
    for problem in problems:
        print("FAIL: " + problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
