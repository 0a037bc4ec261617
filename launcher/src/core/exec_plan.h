// ExecPlan: one worker's program, arguments, environment, output descriptors and working
// directory, laid out as the plain arrays execve() takes. The machine builds it (worker_env.h
// says what goes in), a ProcessLauncher starts it; the child between clone and exec only reads it
// (process/child_exec.h says why it must not allocate).
//
// Thread safety: a plain value, read-only once built.
#pragma once

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

 private:
  std::string path_;
  std::vector<std::string> argv_;
  std::vector<std::string> environment_;
  std::vector<char*> argvPointers_;
  std::vector<char*> envPointers_;
  int stdoutFd_;
  int stderrFd_;
  std::string workingDirectory_;
};

}  // namespace ddprun::launcher
