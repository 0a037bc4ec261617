// AgentSnapshot: what one agent is doing, as a value. The machine produces it
// (AgentMachine::snapshot()); `ddprun status` reads every agent's from the rendezvous (each agent
// publishes its own there) and /healthz serves it as its body. One JSON form for both, written
// and read here only, so the agent that publishes and the command that reads agree by
// construction.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/failure_class.h"
#include "core/incident.h"
#include "core/worker_failure.h"

namespace ddprun::launcher {

// The agent's phase, as users see it (the machine's states, named for them).
enum class AgentPhase { kJoining, kRunning, kLocalDone, kStopping, kFinished };

// One local worker's state.
enum class WorkerState {
  kRunning,    // its process runs
  kSucceeded,  // it exited 0
  kFailed,     // it exited otherwise, or could not start
  kHung,       // found hung: its stacks are being taken, or it is being killed
  kStopped,    // the agent stopped it (the round stopped, a signal)
};

// "joining", "running", "local_done", "stopping", "finished": the names in JSON and in text.
const char* agentPhaseName(AgentPhase phase);
std::optional<AgentPhase> agentPhaseFromName(std::string_view name);
// "running", "succeeded", "failed", "hung", "stopped".
const char* workerStateName(WorkerState state);
std::optional<WorkerState> workerStateFromName(std::string_view name);

struct WorkerSnapshot {
  int rank = -1;
  int localRank = -1;
  long pid = -1;  // -1: it could not be started
  WorkerState state = WorkerState::kRunning;
  double startedAt = 0;                 // epoch seconds
  std::optional<double> lastHeartbeat;  // epoch seconds of its last progress report
                                        // (--hang-timeout only; nothing before the first)
  std::optional<int> exitCode;          // once it ended: its exit code, or 128 + signal
};

struct AgentSnapshot {
  std::string runId;
  int round = -1;    // the round it is in or joining (-1: none formed yet)
  int restarts = 0;  // used so far, for the whole job
  int maxRestarts = 0;
  // This node as the others see it.
  std::string address;
  std::string hostname;
  long agentPid = 0;
  int groupRank = -1;  // in the current round (-1: none)
  int nodes = 0;       // members of the current round
  AgentPhase phase = AgentPhase::kJoining;
  std::vector<WorkerSnapshot> workers;       // of the current round, in local-rank order
  std::optional<WorkerFailure> lastFailure;  // the last worker failure this agent knows of
  // Whose fault the last stop of a round (or the ending) was, as the restart policy decided.
  std::optional<FailureClass> lastFailureClass;
  // While the agent waits before a restart (--restart-backoff): when the wait ends, epoch s.
  std::optional<double> restartAt;
  // Why this node left the job (--max-node-failures: its workers were the root cause K times in
  // a row), once it has.
  std::optional<std::string> leftOut;
  // The health gate (--health-check, the built-in checks): how many times this node stayed out
  // of a round, and why it last did; while its cooldown runs, when the next try is, epoch s.
  int exclusions = 0;
  std::optional<std::string> lastExclusion;
  std::optional<double> healthRetryAt;
  // A spare: joining, over the job's MAX nodes, waiting for a lost node's place (no workers).
  bool spare = false;
  int sparesWanted = 0;         // --spares: how many spares the job wants
  std::optional<int> exitCode;  // once finished: the agent's exit code (the job's outcome here)
  // The last IncidentTimeline::kKept failures this agent recorded, oldest first (the last may be
  // open: still waiting for its restart or its first progress).
  std::vector<Incident> incidents;
  double startedAt = 0;  // the agent's start, epoch seconds
  double updatedAt = 0;  // when this snapshot was taken, epoch seconds
};

// Healthy: joining, running or done locally, with no worker found hung. Not healthy: a worker is
// hung, or the agent is stopping or finished (/healthz answers 503).
bool healthy(const AgentSnapshot& snapshot);

// The one JSON form: {"run_id", "round", "restarts", "max_restarts", "addr", "hostname",
// "agent_pid", "group_rank", "nodes", "state", "healthy", "workers": [{"rank", "local_rank", "pid",
// "state", "started_at", "last_heartbeat"?, "exit_code"?}], "last_failure"?, "failure_class"?
// (failureClassName), "restart_at"? (while a back-off runs), "left_out"? (why this node left the
// job), "exclusions"?, "last_exclusion"?, "health_retry_at"? (the health gate: times this node
// stayed out of a round, why it last did, when it checks again), "spare"? (true while a spare),
// "spares_wanted"? (--spares, when not 0), "incidents"? ([incident.h's form], when any),
// "exit_code"? (finished only),
// "started_at", "updated_at"}. "last_failure" is the failure's one JSON form
// (worker_failure.h, as in a round's stop record) without its traceback, stack and stderr tail:
// those can be large, are published again on every change, and belong to the failure report.
nlohmann::json toJson(const AgentSnapshot& snapshot);
// What /healthz serves to whoever reaches its port: the snapshot's states, counts and times, no
// text beyond the run id (no failure message, no path, no host name or address):
// {"run_id", "round", "restarts", "max_restarts", "agent_pid", "group_rank", "nodes", "state",
// "healthy", "workers": [as in toJson], "last_failure": null | {"rank", "local_rank",
// "group_rank", "exit_code" (the agent's code for it: exit code or 128 + signal), "signal",
// "observed_at", "hang" (hangKindName), "oom" (bool)}, "exclusions" (the health gate's count),
// "health_retry_at"?, "spare"? (as in toJson), "exit_code"? (finished only), "started_at",
// "updated_at"}. docs/status.md says what each field reveals.
nlohmann::json toHealthJson(const AgentSnapshot& snapshot);
// The inverse of toJson. Throws std::invalid_argument naming the field when `value` is not a
// snapshot (a key missing or of the wrong type, an unknown state): what was published by a ddprun
// of another version, or by something else, is refused rather than half read.
AgentSnapshot agentSnapshotFromJson(const nlohmann::json& value);

}  // namespace ddprun::launcher
