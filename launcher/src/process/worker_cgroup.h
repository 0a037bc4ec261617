// The worker cgroup: a cgroup v2 that holds every worker and everything they start, whatever
// sessions they make, so that nothing of a job escapes a stop (where cgroup v2 is writable).
#pragma once

#include <chrono>
#include <memory>
#include <string>

namespace ddprun::launcher {

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
  // The cgroup's directory (O_PATH), for a child created in it (clone3's CLONE_INTO_CGROUP), or
  // -1: where it could not be opened, and once killAll() has written cgroup.kill. Kernels with
  // cgroup.kill's fork-race fix (6.13+; 6.18 here) compare a CLONE_INTO_CGROUP child's kill
  // count with its parent's cgroup instead of its own, so after one kill every child created in
  // the cgroup is killed at birth. Moving in through cgroup.procs is not affected.
  int cloneIntoFd() const { return killed_ ? -1 : directoryFd_; }
  // SIGKILLs every process in the cgroup and waits (bounded) until it is empty.
  void killAll();

 private:
  WorkerCgroup(std::string path, int procsFd, int directoryFd)
      : path_(std::move(path)), procsFd_(procsFd), directoryFd_(directoryFd) {}
  std::string path_;
  int procsFd_;
  int directoryFd_;
  bool killed_ = false;  // cgroup.kill was written (cloneIntoFd)
};

// Kills every process of the cgroup at `path` (cgroup.kill, or one by one on older kernels)
// and waits up to `patience` for it to empty. Used by the agent and by the guardian. True when
// it wrote cgroup.kill.
bool killCgroup(const std::string& path, std::chrono::milliseconds patience);

}  // namespace ddprun::launcher
