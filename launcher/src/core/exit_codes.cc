#include "core/exit_codes.h"

#include <csignal>

namespace ddprun::launcher {

int exitCode(const Ending& ending) {
  switch (ending.kind) {
    case EndKind::kSucceeded:
      return 0;
    case EndKind::kJobFailed:
      return ending.rootCause ? exitCodeOf(*ending.rootCause) : 1;
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

}  // namespace ddprun::launcher
