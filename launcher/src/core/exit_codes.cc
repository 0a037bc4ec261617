#include "core/exit_codes.h"

#include <sys/wait.h>

#include <csignal>

namespace ddprun::launcher {

int exitCode(const Ending& ending) {
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
