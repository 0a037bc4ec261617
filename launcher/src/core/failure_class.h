// FailureClass: whose fault ended a round or the job, decided on evidence (an exit code, a signal,
// an errno carried as a value, the exception type in an error file, the history of the job's
// failures), never on a message's wording. The restart policy (core/restart_policy.h) decides it;
// the exit-code contract for schedulers (core/exit_codes.h) and `ddprun status` say it.
//
// Thread safety: plain values.
#pragma once

#include <optional>
#include <string_view>

namespace ddprun::launcher {

enum class FailureClass {
  kWorker,   // a worker's own failure: an exit code, a signal, an OOM kill, a hang
  kUser,     // the user's: the same root cause again without progress, the no-restart exit
             // code, a program that cannot be executed, a line matching --fail-pattern
  kMachine,  // the machine's: a node lost, workers that could not start for the machine's
             // reason (EAGAIN, ENOMEM, the cgroup), the store lost, the rendezvous failed
  kStopped,  // a handled signal from outside (the scheduler's SIGTERM, Ctrl-C)
};

// "worker", "user", "machine", "stopped": the names in JSON, status and events.
const char* failureClassName(FailureClass kind);
std::optional<FailureClass> failureClassFromName(std::string_view name);

}  // namespace ddprun::launcher
