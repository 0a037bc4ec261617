// PosixLauncher: the real ProcessLauncher, so that no worker is ever left behind.
//
//   agent (child subreaper)
//     |-- guardian   forked first, before any thread: if the agent dies however it dies
//     |              (kill -9 included), it SIGKILLs every worker's process group (guardian.h)
//     |-- worker 0   own session/process group, PR_SET_PDEATHSIG(SIGKILL) (clone_spawn.h)
//     |     `-- grandchildren (same process group; orphans come back to the agent)
//     `-- worker 1 ...
//
// Workers die with the agent through independent mechanisms: their own death signal, the
// guardian killing their process groups (each guarded until its last process is gone, so the
// descendants of a worker that already exited are covered too), the guardian killing every
// process that carries the agent's DDPRUN_AGENT token in its environment (descendants that left
// their worker's session included) and, where cgroup v2 is writable (root, or a delegated
// subtree), the guardian killing the agent's worker cgroup (worker_cgroup.h), which holds every
// descendant. While the agent lives it is a subreaper: orphaned descendants come back to it, so
// it reaps them (no zombies) and kills them with the rest. (Only a descendant that both leaves
// its session and clears its environment escapes, where no cgroup v2 is writable.)
//
// The one exception is on purpose: a process a worker started with `ddprun detach` (cli/detach.h)
// left the worker's session and cgroup and carries DDPRUN_DETACHED=<this agent's marker>
// (core/kept_process.h) instead of DDPRUN_AGENT. Neither the stray sweep nor the guardian kills
// it; when it comes back to this subreaper it is reaped if it exits while the agent lives, and
// the agent never waits for it.
//
// Thread safety: used from the agent's main thread only. That matters: PR_SET_PDEATHSIG fires
// when the *thread* that started the worker exits, and the main thread lives as long as the agent.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/process_launcher.h"
#include "process/clone_spawn.h"
#include "process/guardian.h"
#include "process/worker_cgroup.h"

namespace ddprun::launcher {

class PosixLauncher final : public ProcessLauncher {
 public:
  // Makes this process a child subreaper. `guardian` may be null. Workers get
  // `workerDescriptorLimit` as their RLIMIT_NOFILE (none: the agent's own).
  explicit PosixLauncher(Guardian* guardian,
                         std::optional<rlimit> workerDescriptorLimit = std::nullopt);
  PosixLauncher(const PosixLauncher&) = delete;
  PosixLauncher& operator=(const PosixLauncher&) = delete;

  pid_t spawn(const ExecPlan& plan) override;
  // Also signals the groups of exited workers whose descendants still run.
  void signalAll(int signal) override;
  void signalLeaders(int signal) override;
  void signalProcess(pid_t pid, int signal) override;
  // Up its chain of parents in /proc (core/proc_stat.h) to a running worker. A process whose
  // parent exited was reparented to this subreaper and is no worker's descendant any more.
  bool belongsToWorkers(pid_t pid) const override;
  bool anyRunning() const override { return !running_.empty(); }
  // A group of lingering_ with a process in it now.
  bool anyLeftBehind() const override;
  // Orphaned descendants and the guardian are reaped too, and otherwise ignored.
  std::vector<ExitedWorker> reap() override;
  // The worker cgroup (everything, whatever session it made), then any other descendant that
  // was reparented to this subreaper, but one kept on purpose; reaps them.
  void killStrays() override;
  void killAll() override;
  // The worker cgroup's path ("" = none: cgroup v2 is not writable here).
  std::string cgroupPath() const { return cgroup_ ? cgroup_->path() : std::string(); }

 private:
  // Drops (and untracks in the guardian) the groups in lingering_ that have no process left.
  void forgetEmptyGroups();
  // Whether `pid` was kept on purpose by `ddprun detach` from this agent's workers.
  bool kept(pid_t pid) const;

  CloneSpawner spawner_;
  Guardian* guardian_;
  std::unique_ptr<WorkerCgroup> cgroup_;
  pid_t self_;
  std::set<pid_t> running_;    // workers started and not reaped yet
  std::set<pid_t> lingering_;  // groups of reaped workers that may still have members
  std::string keptEntry_;      // DDPRUN_DETACHED=<the workers' DDPRUN_AGENT>; "" = none yet
};

}  // namespace ddprun::launcher
