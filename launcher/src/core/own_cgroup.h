// This process's cgroup v2 and the name of an agent's worker cgroup, in one place: the agent
// makes its worker cgroup under its own (process/worker_cgroup.cc) and `ddprun detach` leaves it
// for the agent's own again (cli/detach.cc).
//
// Thread safety: pure functions over /proc.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace ddprun::launcher {

// The directory of this process's cgroup v2 ("0::/path" in /proc/self/cgroup, under the mount
// point of the cgroup2 file system), or nothing when no cgroup v2 is mounted.
std::optional<std::string> ownCgroup();

// The name of the worker cgroup of the agent `agent`: "ddprun-<pid>", under the agent's own.
std::string workerCgroupName(pid_t agent);

}  // namespace ddprun::launcher
