// ProcessLauncher: how the agent starts, signals and reaps its workers. The agent's state machine
// sees only this interface; PosixLauncher (posix_launcher.h) is the real one, and the unit tests
// use a fake that scripts exits, so the restart and stop decisions are tested in milliseconds.
//
// Thread safety: an implementation is used from the agent's event-loop thread only.
#pragma once

#include <sys/types.h>

#include <stdexcept>
#include <vector>

#include "core/exec_plan.h"

namespace ddprun::launcher {

// A worker could not be started; what() names the program and the reason, error() is the errno
// of the step that failed (0: none known) and exec() whether that step was the exec of the
// program (its path, its rights) rather than the agent's own (clone, the cgroup, memory).
class SpawnError : public std::runtime_error {
 public:
  explicit SpawnError(const std::string& what, int error = 0, bool exec = false)
      : std::runtime_error(what), error_(error), exec_(exec) {}
  int error() const { return error_; }
  bool exec() const { return exec_; }

 private:
  int error_ = 0;
  bool exec_ = false;
};

struct ExitedWorker {
  pid_t pid;
  int waitStatus;  // as from waitpid
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;

  // Starts a worker; returns its pid (also its process group). Blocks only until the child has
  // exec'd or failed to. Throws SpawnError.
  virtual pid_t spawn(const ExecPlan& plan) = 0;
  // Sends `signal` to every worker still running and to what its descendants left behind: each
  // worker's whole process group (job control; SIGKILL at a stop's deadline).
  virtual void signalAll(int signal) = 0;
  // Sends `signal` to each running worker's own process only, its leader (kill, not killpg): a
  // graceful stop, which leaves the worker's children (DataLoader workers) to the worker.
  virtual void signalLeaders(int signal) = 0;
  // Sends `signal` to the one process `pid` (a hung worker; the pid a FileTimer names, once
  // belongsToWorkers() said yes).
  virtual void signalProcess(pid_t pid, int signal) = 0;
  // Whether `pid` is a running worker or a descendant of one: the processes a worker's FileTimer
  // request may have signalled (torch's client names the process that asks, which may be one the
  // worker started). Asked when the timer expires, just before the signal. Never blocks.
  virtual bool belongsToWorkers(pid_t pid) const = 0;
  virtual bool anyRunning() const = 0;
  // Whether a process is left in the process group of a worker that has exited (a wrapper
  // script's trainer, a rank's DataLoader workers). Never blocks.
  virtual bool anyLeftBehind() const = 0;
  // The workers that exited since the last call (call when SIGCHLD arrives); never blocks.
  virtual std::vector<ExitedWorker> reap() = 0;
  // Kills what is left of the workers' trees once the workers are gone.
  virtual void killStrays() = 0;
  // SIGKILLs every worker and reaps them all before returning (the agent is leaving).
  virtual void killAll() = 0;
};

}  // namespace ddprun::launcher
