// ExecPlan: one worker's program, arguments, environment, output descriptors and working
// directory, laid out as the plain arrays execve() takes. The machine builds it (worker_env.h
// says what goes in), a ProcessLauncher starts it; the child between clone and exec only reads it
// (process/child_exec.h says why it must not allocate).
//
// Thread safety: a plain value, read-only once built.
#pragma once

#include <sched.h>

#include <cstddef>
#include <string>
#include <vector>

namespace ddprun::launcher {

class ExecPlan {
 public:
  ExecPlan(std::string path, std::vector<std::string> argv, std::vector<std::string> environment,
           int stdoutFd, int stderrFd, std::string workingDirectory = {});

  const char* path() const { return path_.c_str(); }
  char* const* argv() const { return argvPointers_.data(); }
  char* const* envp() const { return envPointers_.data(); }
  int stdoutFd() const { return stdoutFd_; }
  int stderrFd() const { return stderrFd_; }
  const char* workingDirectory() const {
    return workingDirectory_.empty() ? nullptr : workingDirectory_.c_str();
  }

  // The worker runs on these CPUs only (--numa-binding): the child sets its affinity before exec.
  // Empty: it keeps the agent's.
  void bindToCpus(const std::vector<int>& cpus);
  // The mask for sched_setaffinity and its size in bytes; null when not bound.
  const cpu_set_t* cpuAffinity() const {
    return cpuMask_.empty() ? nullptr : reinterpret_cast<const cpu_set_t*>(cpuMask_.data());
  }
  std::size_t cpuAffinitySize() const { return cpuMask_.size() * sizeof(unsigned long); }

 private:
  std::string path_;
  std::vector<std::string> argv_;
  std::vector<std::string> environment_;
  std::vector<char*> argvPointers_;
  std::vector<char*> envPointers_;
  int stdoutFd_;
  int stderrFd_;
  std::string workingDirectory_;
  std::vector<unsigned long> cpuMask_;  // a cpu_set_t of any size (CPU_ALLOC's layout)
};

}  // namespace ddprun::launcher
