// The guardian: a helper process, forked before the agent starts any thread, that kills every
// worker (and removes the agent's directories) when the agent dies, however it dies: it holds
// the read end of a pipe from the agent and acts when the pipe closes. process_launcher.h says
// how it fits with the other mechanisms that keep workers from outliving the agent.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

namespace ddprun::launcher {

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
  // A directory of the agent's to delete if it dies (its scratch files); every directory so
  // registered is removed, not only the last.
  void removeOnDeath(const std::string& directory);
  // If the agent dies, also SIGKILL every process whose environment holds `entry` ("NAME=value"):
  // the workers' descendants that left their process group, where no cgroup holds them. A
  // process kept on purpose is spared: one whose environment also holds DDPRUN_DETACHED=<the
  // same value> (core/kept_process.h; `ddprun detach` takes the entry out anyway).
  void killHoldersOf(const std::string& entry);

 private:
  Guardian(pid_t pid, int commandFd) : pid_(pid), commandFd_(commandFd) {}
  void send(const std::string& line);

  pid_t pid_;
  int commandFd_;
};

}  // namespace ddprun::launcher
