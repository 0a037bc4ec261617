// Starting one worker like posix_spawn does: clone(CLONE_VM | CLONE_VFORK) on a stack of its own,
// every signal blocked around it, the agent's thread waiting until the child has exec'd.
// Nothing of the agent is copied (a fork of the multi-threaded agent cost ~5 ms per worker in
// page tables and copy-on-write faults). child_exec.h is the child's side.
//
// Thread safety: one CloneSpawner per thread (it owns the child stack).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>

#include "process/child_exec.h"

namespace ddprun::launcher {

class CloneSpawner {
 public:
  // Children get `descriptorLimit` as their RLIMIT_NOFILE; none: they inherit the agent's.
  explicit CloneSpawner(std::optional<rlimit> descriptorLimit = std::nullopt)
      : descriptorLimit_(descriptorLimit) {}
  ~CloneSpawner();
  CloneSpawner(const CloneSpawner&) = delete;
  CloneSpawner& operator=(const CloneSpawner&) = delete;

  // Starts `plan`; the child joins the cgroup whose cgroup.procs is open as `cgroupProcs` (or
  // -1). Returns the pid once the child has exec'd. Throws SpawnError (process_launcher.h).
  pid_t spawn(const ExecPlan& plan, int cgroupProcs);

 private:
  // The stack a child runs on between clone and exec; made at the first spawn.
  static constexpr std::size_t kChildStackBytes = 256 * 1024;
  std::optional<rlimit> descriptorLimit_;
  char* childStack_ = nullptr;
  pid_t self_ = 0;
};

}  // namespace ddprun::launcher
