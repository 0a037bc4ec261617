// The restart policy: after a round stopped, whether the job restarts, after how long, and if
// not, whose fault it is (FailureClass). Every agent of a job must reach the same decision, so it
// is a pure function of what is the same on every node: the round's stop record (the root cause,
// with the progress its node saw) and the RestartHistory, which travels in each round's close
// record (membership/round_records.h) as the restart count did, computed by the closer of round
// r+1 from round r's history and stop (historyAfter), the one rule every agent applies too.
// SoloRendezvous keeps it locally the same way.
//
//   a worker exits with --no-restart-exit-code          stop now, user
//   a worker could not be exec'd (ENOENT, EACCES, ...)   stop now, user
//   a worker wrote a line matching --fail-pattern        stop now, user
//   a worker hung at exit (its peers finished)           stop now, worker
//   the same signature as the last failure, and no
//     progress in between                                stop now, user (whatever budget is left)
//   --max-restarts spent                                 stop, the root cause's class (budget)
//   an elastic job whose root cause was on the same
//     node --max-node-failures times in a row            that node leaves (class machine), the
//                                                        others restart at once without it;
//                                                        kept when the job would drop below MIN
//                                                        or it hosts the rendezvous store
//   more than --max-no-progress-restarts in a row
//     without progress                                   stop, the root cause's class (budget)
//   otherwise                                            restart after the back-off
//
// Thread safety: plain values and pure functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/failure_class.h"
#include "core/stop_reason.h"
#include "core/worker_failure.h"
#include "ddprun/launcher/launch_config.h"

namespace ddprun::launcher {

// What the job's failures so far say, as of the start of a round.
struct RestartHistory {
  int restarts = 0;       // failures restarted after, for the whole job (the restart count)
  int noProgress = 0;     // failures in a row whose rounds made no progress, the last counted
  std::string signature;  // the last failure's (failureSignature), "" before any
  // The node (id) of the last root cause, and how many root causes in a row were on it.
  std::int64_t causeNode = -1;
  int causeStreak = 0;

  bool operator==(const RestartHistory&) const = default;
};

// The close record's form of it; the inverse takes what is missing as 0/"" (a record of an
// older agent with "restarts" alone) and throws nlohmann::json's errors on wrong types.
nlohmann::json toJson(const RestartHistory& history);
RestartHistory restartHistoryFromJson(const nlohmann::json& value);

// The history of the round after one that began with `history` and stopped for `stop`. A
// membership change (a node lost, joined or left) is neither progress nor a failure: the
// history is kept as it was.
RestartHistory historyAfter(const RestartHistory& history, const StopReason& stop);

// The root cause's signature: "ValueError at train.py:12" (the error file's exception type and
// the innermost frame of its traceback), else "exit 3", "signal 11", "hang no_progress",
// "start errno 11". Two failures with the same one are the same root cause.
std::string failureSignature(const WorkerFailure& failure);

// What the failure itself says of its class, before any history: a start that failed for the
// machine's reason is the machine's; a program that cannot be executed, or an exit with the
// no-restart code, or a line matching --fail-pattern, is the user's; anything else the worker's.
FailureClass evidenceClass(const WorkerFailure& failure, const RestartPolicy& policy);

// A doubling wait, the n-th in a row (n >= 1): initial * 2^(n-1), at most `cap` (0: no cap). The
// restart back-off and the health gate's cooldown.
std::chrono::milliseconds doublingWait(int n, std::chrono::milliseconds initial,
                                       std::chrono::milliseconds cap);

// The wait before restart after a failure that is the n-th in a row without progress (n >= 1):
// INITIAL * 2^(n-1), capped at CAP (16 x INITIAL when not given).
std::chrono::milliseconds backoffFor(int n, const RestartPolicy& policy);

// The round that stopped, as the node rule needs it: the same on every member.
struct RoundShape {
  bool elastic = false;  // c10d or etcd with MIN < MAX: the job may go on with fewer nodes
  int nodes = 0;         // members of the round that stopped
  int minNodes = 1;      // MIN
  // --spares: a spare takes a leaving node's seat, so with spares wanted the rule applies at
  // MIN = MAX as well. The wanted count, not the waiting one: it is the same on every member.
  int spares = 0;
};

// Whether the root cause's node stays in the job (--max-node-failures).
enum class NodeTrust {
  kTrusted,       // the rule does not apply (off, not elastic, or the streak is short)
  kLeaves,        // the node leaves the job; the others re-form without it
  kKeptAtMin,     // its streak reached the limit, but without it (and the spares wanted) the job
                  // would have < MIN nodes
  kKeptStoreHost  // its streak reached the limit, but it hosts the rendezvous store
};

struct RestartDecision {
  enum class Why {
    kRestart,            // the job restarts (after `backoff`)
    kNoRestartExitCode,  // the worker exited with --no-restart-exit-code
    kCannotExecute,      // the worker's program cannot be executed
    kFailPattern,        // a worker wrote a line matching --fail-pattern
    kHungAtExit,         // a worker hung at exit while its peers finished
    kSameFailure,        // the same root cause again without progress
    kBudgetSpent,        // --max-restarts spent
    kNoProgress,         // --max-no-progress-restarts in a row without progress
  };
  Why why = Why::kRestart;
  FailureClass failureClass = FailureClass::kWorker;
  RestartHistory history;  // of the next round (what historyAfter says)
  std::chrono::milliseconds backoff{0};
  // The root cause's node under --max-node-failures (its id is the stop record's `node`). A node
  // that leaves ends with class machine; the job restarts without it, the failure's restart
  // already counted in `history` and no back-off (its cause leaves with it).
  NodeTrust node = NodeTrust::kTrusted;

  bool restart() const { return why == Why::kRestart; }
  // Why the job stops, for the last line and the log: "the same failure as the last one
  // (ValueError at x.py:3) with no progress in between", "the restart budget (--max-restarts 3)
  // is spent", ... (the signature escaped by the caller where it comes from a store).
  std::string text(const RestartPolicy& policy) const;
};

// What the node rule decided, for the log: "node 2 (host-c) was the root cause of the last 3
// failures in a row (--max-node-failures 3), the last: exit 1; it leaves the job" (the host and
// the signature escaped). "" for kTrusted.
std::string nodeTrustText(const RestartDecision& decision, const StopReason& stop,
                          const RestartPolicy& policy, const RoundShape& shape);

// REQUIRES: stop is a kWorkerFailed stop with its failure. `shape`: the round that stopped (the
// default, not elastic, turns the node rule off).
RestartDecision decideRestart(const RestartHistory& history, const StopReason& stop,
                              const RestartPolicy& policy, const RoundShape& shape = {});

}  // namespace ddprun::launcher
