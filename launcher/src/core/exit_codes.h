// How a run of the agent ends, and the one place that turns that into its exit code:
//   0            every worker of every node exited 0
//   the root cause's exit code, or 128+signal when a worker was killed by one (a deliberate
//                improvement over torchrun's constant 1)
//   128+signal   the agent itself was stopped by a handled signal (SIGINT, SIGTERM, ...)
//   1            the rendezvous failed (timeout, too few nodes) or its store was lost
//   141          ddprun's stdout closed (`ddprun ... | head`): 128+SIGPIPE, what a worker that
//                inherited the console would have died of (torchrun exits 1 then)
//   2            bad input found late (a wrong endpoint, the port to host the store on taken)
#pragma once

#include <optional>
#include <string>

#include "core/worker_failure.h"

namespace ddprun::launcher {

enum class EndKind { kSucceeded, kJobFailed, kSignalled, kRendezvousFailed, kStoreLost, kBadInput, kConsoleClosed };

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

}  // namespace ddprun::launcher
