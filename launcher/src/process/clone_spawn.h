// Starting one worker like posix_spawn does: clone(CLONE_VM | CLONE_VFORK) on a stack of its own,
// every signal blocked around it, the agent's thread waiting until the child has exec'd.
// Nothing of the agent is copied (a fork of the multi-threaded agent would copy its page tables
// and take copy-on-write faults, per worker). child_exec.h is the child's side.
//
// Where the agent has a worker cgroup, the child is created in it (clone3's CLONE_INTO_CGROUP,
// Linux 5.7+) instead of moving itself there by writing cgroup.procs. A move takes the kernel's
// cgroup_threadgroup_rwsem for writing, and the first move after a quiet while waits for an RCU
// grace period (milliseconds: docs/benchmarks.md, "Launch at the floor"), paid by the first
// worker of every launch and restart while the agent waits on its vfork. Created in place, no
// process moves at all. Kernels or hierarchies without it fall back to the write, once and for the
// rest of the run; so does a cgroup that has been killed (WorkerCgroup::cloneIntoFd says why).
//
// Thread safety: one CloneSpawner per thread (it owns the child stack).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>

#include "process/child_exec.h"

namespace ddprun::launcher {

// Where a child goes: the worker cgroup's directory for clone3 and its cgroup.procs for the
// fallback, or neither (-1: the child stays in the agent's cgroup).
struct CgroupTarget {
  int directoryFd = -1;
  int procsFd = -1;
};

class CloneSpawner {
 public:
  // Children get `descriptorLimit` as their RLIMIT_NOFILE; none: they inherit the agent's.
  explicit CloneSpawner(std::optional<rlimit> descriptorLimit = std::nullopt)
      : descriptorLimit_(descriptorLimit) {}
  ~CloneSpawner();
  CloneSpawner(const CloneSpawner&) = delete;
  CloneSpawner& operator=(const CloneSpawner&) = delete;

  // Starts `plan` in `cgroup`. Returns the pid once the child has exec'd. Throws SpawnError
  // (process_launcher.h).
  pid_t spawn(const ExecPlan& plan, CgroupTarget cgroup);

 private:
  // The stack a child runs on between clone and exec; made at the first spawn.
  static constexpr std::size_t kChildStackBytes = 256 * 1024;
  std::optional<rlimit> descriptorLimit_;
  char* childStack_ = nullptr;
  pid_t self_ = 0;
  // False once clone3 into a cgroup was refused as unsupported: the write from then on.
  bool intoCgroup_ = true;
};

}  // namespace ddprun::launcher
