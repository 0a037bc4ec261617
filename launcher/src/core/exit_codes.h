// How a run of the agent ends (Ending), and the one place that turns that into its exit code
// (exitCode). Every path of the agent ends through it, start-up problems included; docs/errors.md
// ("Exit codes of ddprun") explains each code to users and points here.
#pragma once

#include <optional>
#include <string>

#include "core/worker_failure.h"

namespace ddprun::launcher {

enum class EndKind {
  kSucceeded,  // 0: every worker of every node exited 0
  kJobFailed,  // the root cause's exit code, or 128+signal when a signal killed it (torchrun: 1)
  kSignalled,  // 128+signal: the agent itself got a handled signal (SIGINT, SIGTERM, ...)
  kRendezvousFailed,  // 1: join timeout, too few nodes, another run owns the store
  kStoreLost,         // 1: the rendezvous store stopped answering
  kBadInput,  // 2: what the user gave is wrong (one line naming the fix), found at start or late
  kConsoleClosed,  // 141 (128+SIGPIPE): ddprun's stdout closed (`ddprun ... | head`; torchrun: 1)
};

struct Ending {
  static Ending succeeded() { return {}; }
  static Ending jobFailed(WorkerFailure rootCause, std::string message) {
    return {EndKind::kJobFailed, std::move(rootCause), 0, std::move(message)};
  }
  static Ending signalled(int signal) { return {EndKind::kSignalled, std::nullopt, signal, {}}; }
  static Ending rendezvousFailed(std::string message) {
    return {EndKind::kRendezvousFailed, std::nullopt, 0, std::move(message)};
  }
  static Ending storeLost(std::string message) {
    return {EndKind::kStoreLost, std::nullopt, 0, std::move(message)};
  }
  static Ending consoleClosed(std::string message) {
    return {EndKind::kConsoleClosed, std::nullopt, 0, std::move(message)};
  }
  static Ending badInput(std::string message) {
    return {EndKind::kBadInput, std::nullopt, 0, std::move(message)};
  }

  EndKind kind = EndKind::kSucceeded;
  std::optional<WorkerFailure> rootCause;  // kJobFailed
  int signal = 0;                          // kSignalled
  std::string message;                     // one line for stderr ("" = none)
};

int exitCode(const Ending& ending);

// A reaped child's wait status as a shell reports it: its exit code, or 128 + the signal that
// killed it; 1 for a status that is neither.
int shellExitCode(int waitStatus);
// Whether a wait status is an exit with code 0.
bool exitedZero(int waitStatus);

}  // namespace ddprun::launcher
