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

void ExecPlan::bindToCpus(const std::vector<int>& cpus) {
  cpuMask_.clear();
  constexpr int kBits = 8 * sizeof(unsigned long);
  for (int cpu : cpus) {
    if (cpu < 0) continue;
    const auto word = static_cast<std::size_t>(cpu / kBits);
    if (cpuMask_.size() <= word) cpuMask_.resize(word + 1, 0);
    cpuMask_[word] |= 1UL << (cpu % kBits);
  }
}

}  // namespace ddprun::launcher
