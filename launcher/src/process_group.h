// Starting, signalling and reaping the local workers, so that none is ever left behind.
//
//   agent (child subreaper)
//     |-- guardian   forked first, before any thread: if the agent dies however it dies
//     |              (kill -9 included), it SIGKILLs every worker's process group
//     |-- worker 0   own session/process group, PR_SET_PDEATHSIG(SIGKILL)
//     |     `-- grandchildren (same process group; orphans come back to the agent)
//     `-- worker 1 ...
//
// Workers die with the agent through independent mechanisms: their own death signal, the
// guardian killing their process groups (each guarded until its last process is gone, so the
// descendants of a worker that already exited are covered too), the guardian killing every
// process that carries the agent's DDPRUN_AGENT token in its environment (descendants that left
// their worker's session included) and, where cgroup v2 is writable (root, or a delegated
// subtree), the guardian killing the agent's worker cgroup, which holds every descendant. While
// the agent lives it is a subreaper: orphaned descendants come back to it, so it reaps them (no
// zombies) and kills them with the rest. (Only a descendant that both leaves its session and
// clears its environment escapes, where no cgroup v2 is writable.)
//
// Thread safety: WorkerProcesses is used from the agent's main thread only. That matters:
// PR_SET_PDEATHSIG fires when the *thread* that forked the worker exits, and the main thread
// lives as long as the agent.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "child_exec.h"

namespace ddprun::launcher {

// A worker could not be started; what() names the program and the reason.
class SpawnError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A cgroup v2 that holds every worker and everything they start, whatever sessions they make.
class WorkerCgroup {
 public:
  // Creates "ddprun-<pid>" under this process's own cgroup v2. Nothing when cgroup v2 is not
  // mounted or not writable (then process groups are all there is).
  static std::unique_ptr<WorkerCgroup> create();
  ~WorkerCgroup();  // kills what is left and removes the cgroup
  WorkerCgroup(const WorkerCgroup&) = delete;
  WorkerCgroup& operator=(const WorkerCgroup&) = delete;

  const std::string& path() const { return path_; }
  // An open cgroup.procs for a child to join with write("0").
  int procsFd() const { return procsFd_; }
  // SIGKILLs every process in the cgroup and waits (bounded) until it is empty.
  void killAll();

 private:
  WorkerCgroup(std::string path, int procsFd) : path_(std::move(path)), procsFd_(procsFd) {}
  std::string path_;
  int procsFd_;
};

// Kills every process of the cgroup at `path` (cgroup.kill, or one by one on older kernels)
// and waits up to `patience` for it to empty. Used by the agent and by the guardian.
void killCgroup(const std::string& path, std::chrono::milliseconds patience);

// The kill-everything-if-the-agent-dies helper process.
class Guardian {
 public:
  // Forks the guardian. REQUIRES: no other thread exists yet (the child runs ordinary code).
  // Returns nothing if it could not be started (the agent works on without it).
  static std::unique_ptr<Guardian> start();
  ~Guardian();  // tells the guardian to exit quietly
  Guardian(const Guardian&) = delete;
  Guardian& operator=(const Guardian&) = delete;

  pid_t pid() const { return pid_; }
  void track(pid_t processGroup);
  void untrack(pid_t processGroup);
  // The cgroup to kill (and remove) too if the agent dies.
  void guardCgroup(const std::string& path);
  // A directory of the agent's to delete if it dies (its scratch files).
  void removeOnDeath(const std::string& directory);
  // If the agent dies, also SIGKILL every process whose environment holds `entry` ("NAME=value"):
  // the workers' descendants that left their process group, where no cgroup holds them.
  void killHoldersOf(const std::string& entry);

 private:
  Guardian(pid_t pid, int commandFd) : pid_(pid), commandFd_(commandFd) {}
  void send(const std::string& line);

  pid_t pid_;
  int commandFd_;
};

struct ExitedWorker {
  pid_t pid;
  int waitStatus;  // as from waitpid
};

class WorkerProcesses {
 public:
  // Makes this process a child subreaper. `guardian` may be null.
  explicit WorkerProcesses(Guardian* guardian);
  ~WorkerProcesses();
  WorkerProcesses(const WorkerProcesses&) = delete;
  WorkerProcesses& operator=(const WorkerProcesses&) = delete;

  // Starts a worker; returns its pid (also its process group). Blocks only until the child has
  // exec'd or failed to. Throws SpawnError.
  pid_t spawn(const ExecPlan& plan);

  // Sends `signal` to the process group of every worker still running, and to the groups of
  // exited workers whose descendants still run.
  void signalAll(int signal);
  bool anyRunning() const { return !running_.empty(); }
  std::size_t runningCount() const { return running_.size(); }

  // Reaps every child that has exited (call when SIGCHLD arrives): returns the workers among
  // them; orphaned descendants and the guardian are reaped and otherwise ignored.
  std::vector<ExitedWorker> reap();

  // SIGKILLs what is left of the workers' trees once the workers are gone: the worker cgroup
  // (everything, whatever session it made), then any other descendant that was reparented to
  // this subreaper; reaps them.
  void killStrays();

 private:
  // Drops (and untracks in the guardian) the groups in lingering_ that have no process left.
  void forgetEmptyGroups();

  // The stack a child runs on between clone and exec (child_exec.h); made at the first spawn.
  static constexpr std::size_t kChildStackBytes = 256 * 1024;
  char* childStack_ = nullptr;
  Guardian* guardian_;
  std::unique_ptr<WorkerCgroup> cgroup_;
  pid_t self_;
  std::set<pid_t> running_;    // workers started and not reaped yet
  std::set<pid_t> lingering_;  // groups of reaped workers that may still have members
};

// Resolves `name` like execvp (PATH search when it has no '/'); nothing if not found.
std::optional<std::string> findExecutable(const std::string& name, const std::string& path);

}  // namespace ddprun::launcher
