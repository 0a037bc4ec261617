#include "core/exit_codes.h"

#include <sys/wait.h>

#include <csignal>

namespace ddprun::launcher {

namespace {

int classCode(FailureClass failureClass) {
  switch (failureClass) {
    case FailureClass::kUser:
      return kExitUserError;
    case FailureClass::kWorker:
      return kExitBudgetSpent;
    case FailureClass::kMachine:
      return kExitMachineFault;
    case FailureClass::kStopped:
      return kExitStopped;
  }
  return kExitBudgetSpent;
}

}  // namespace

int exitCode(const Ending& ending, ExitCodeScheme scheme) {
  if (scheme == ExitCodeScheme::kClasses) {
    switch (ending.kind) {
      case EndKind::kJobFailed:
      case EndKind::kSignalled:
      case EndKind::kRendezvousFailed:
      case EndKind::kStoreLost:
        return classCode(ending.failureClass);
      default:
        break;
    }
  }
  switch (ending.kind) {
    case EndKind::kSucceeded:
      return 0;
    case EndKind::kJobFailed: {
      // A failed job never exits 0, nor with a code the shell would read as 0 (256): a root
      // cause whose status says otherwise (a stop record forged in a store without a token, or
      // corrupted) fails with 1.
      const int code = ending.rootCause ? exitCodeOf(*ending.rootCause) : 1;
      return code >= 1 && code <= 255 ? code : 1;
    }
    case EndKind::kSignalled:
      return 128 + ending.signal;
    case EndKind::kRendezvousFailed:
    case EndKind::kStoreLost:
      return 1;
    case EndKind::kBadInput:
      return 2;
    case EndKind::kConsoleClosed:
      return 128 + SIGPIPE;
  }
  return 1;
}

int shellExitCode(int waitStatus) {
  if (WIFEXITED(waitStatus)) return WEXITSTATUS(waitStatus);
  if (WIFSIGNALED(waitStatus)) return 128 + WTERMSIG(waitStatus);
  return 1;
}

bool exitedZero(int waitStatus) { return WIFEXITED(waitStatus) && WEXITSTATUS(waitStatus) == 0; }

}  // namespace ddprun::launcher
