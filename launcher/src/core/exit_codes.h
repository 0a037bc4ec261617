// How a run of the agent ends (Ending), and the one place that turns that into its exit code
// (exitCode). Every path of the agent ends through it, start-up problems included; docs/errors.md
// ("Exit codes of ddprun") explains each code to users and points here.
#pragma once

#include <optional>
#include <string>

#include "core/failure_class.h"
#include "core/worker_failure.h"
#include "ddprun/launcher/launch_config.h"

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

// The exit codes of the failure classes (--exit-codes classes), for schedulers: whether to
// requeue the job, and where (docs/errors.md, "The exit-code contract for schedulers").
inline constexpr int kExitUserError = 80;     // the user's bug: do not requeue
inline constexpr int kExitBudgetSpent = 81;   // restarts spent on the worker's failures
inline constexpr int kExitMachineFault = 82;  // requeue, preferably on other machines
inline constexpr int kExitStopped = 83;       // stopped from outside, preempted: requeue

struct Ending {
  static Ending succeeded() { return {}; }
  // `failureClass`: whose fault, as the restart policy decided (kWorker: the budget is spent).
  static Ending jobFailed(WorkerFailure rootCause, std::string message,
                          FailureClass failureClass = FailureClass::kWorker) {
    return {EndKind::kJobFailed, std::move(rootCause), 0, std::move(message), failureClass};
  }
  static Ending signalled(int signal) {
    return {EndKind::kSignalled, std::nullopt, signal, {}, FailureClass::kStopped};
  }
  static Ending rendezvousFailed(std::string message) {
    return {EndKind::kRendezvousFailed, std::nullopt, 0, std::move(message),
            FailureClass::kMachine};
  }
  static Ending storeLost(std::string message) {
    return {EndKind::kStoreLost, std::nullopt, 0, std::move(message), FailureClass::kMachine};
  }
  static Ending consoleClosed(std::string message) {
    return {EndKind::kConsoleClosed, std::nullopt, 0, std::move(message)};
  }
  static Ending badInput(std::string message) {
    return {EndKind::kBadInput, std::nullopt, 0, std::move(message), FailureClass::kUser};
  }

  EndKind kind = EndKind::kSucceeded;
  std::optional<WorkerFailure> rootCause;  // kJobFailed
  int signal = 0;                          // kSignalled
  std::string message;                     // one line for stderr ("" = none)
  // Whose fault the ending is (meaningful for every kind but kSucceeded and kConsoleClosed).
  FailureClass failureClass = FailureClass::kWorker;
};

// The agent's exit code for `ending` under `scheme` (--exit-codes): the same for every scheme
// but where a job failed, a signal stopped it, or the rendezvous or the store failed.
int exitCode(const Ending& ending, ExitCodeScheme scheme = ExitCodeScheme::kRootCause);

// A reaped child's wait status as a shell reports it: its exit code, or 128 + the signal that
// killed it; 1 for a status that is neither.
int shellExitCode(int waitStatus);
// Whether a wait status is an exit with code 0.
bool exitedZero(int waitStatus);

}  // namespace ddprun::launcher
