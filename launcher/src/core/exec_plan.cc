#include "core/exec_plan.h"

namespace ddprun::launcher {

ExecPlan::ExecPlan(std::string path, std::vector<std::string> argv,
                   std::vector<std::string> environment, int stdoutFd, int stderrFd,
                   std::string workingDirectory)
    : path_(std::move(path)),
      argv_(std::move(argv)),
      environment_(std::move(environment)),
      stdoutFd_(stdoutFd),
      stderrFd_(stderrFd),
      workingDirectory_(std::move(workingDirectory)) {
  for (std::string& a : argv_) argvPointers_.push_back(a.data());
  argvPointers_.push_back(nullptr);
  for (std::string& e : environment_) envPointers_.push_back(e.data());
  envPointers_.push_back(nullptr);
}

}  // namespace ddprun::launcher
