#include "process/child_exec.h"

namespace ddprun::launcher {

DDPRUN_CHILD_CODE void execChild(const ExecPlan& plan, int errorPipe, pid_t parent, int cgroupProcs,
                                 const rlimit* descriptorLimit) {
  ChildSteps steps;
  steps.group = ChildSteps::Group::kNewSession;
  steps.dieWithParent = parent;
  steps.signals = ChildSteps::Signals::kDefault;
  steps.cgroupProcs = cgroupProcs;
  steps.stdoutFd = plan.stdoutFd();
  steps.stderrFd = plan.stderrFd();
  steps.workingDirectory = plan.workingDirectory();
  steps.descriptorLimit = descriptorLimit;
  steps.cpuAffinity = plan.cpuAffinity();
  steps.cpuAffinitySize = plan.cpuAffinitySize();
  runChild(steps, plan.path(), plan.argv(), plan.envp(), errorPipe);
}

}  // namespace ddprun::launcher
