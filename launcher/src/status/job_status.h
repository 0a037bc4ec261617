// JobStatus: what `ddprun status` shows of a job, made from every node's AgentSnapshot (the one
// form core/agent_snapshot.h defines, as each agent published it in the rendezvous), and its two
// renderings: the text for people and the JSON object for programs. Pure: the clock is passed in,
// so the unit tests render fixed snapshots.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/agent_snapshot.h"

namespace ddprun::launcher {

// `ddprun status`'s exit codes (docs/errors.md, "Exit codes of ddprun status").
inline constexpr int kStatusShown = 0;        // the job runs (or forms): shown
inline constexpr int kStatusStoreFailed = 1;  // its store answered, then failed the reading
inline constexpr int kStatusBadInput = 2;     // bad input, as for every ddprun command
inline constexpr int kStatusNoJob = 3;        // nothing answers at the endpoint, or no such run id
inline constexpr int kStatusEnded = 4;        // every node of the job has finished: shown

// A node whose snapshot is older than this while it is not finished may be gone (killed
// without a word): the agents refresh theirs every few seconds while they run.
inline constexpr double kStaleSeconds = 15;

struct JobStatus {
  std::string runId;
  // Every node's snapshot, by group rank (nodes without one last), then address.
  std::vector<AgentSnapshot> nodes;
  // Keys under the run whose value was not a snapshot (another version's), by name.
  std::vector<std::string> unreadable;
};

// Sorts `nodes` as JobStatus keeps them, leaving out those of an earlier run of the same run id
// (finished before any node still active started: a store that outlives its jobs keeps them).
JobStatus jobStatusOf(std::string runId, std::vector<AgentSnapshot> nodes);

// Every node has finished (and there is at least one).
bool ended(const JobStatus& status);
// The job's exit code once ended: 0 when every node exited 0, else the first other node's (by
// group rank): the agents of a failed job all exit with the root cause's code.
int outcomeCode(const JobStatus& status);
// The last worker failure any node knows of (the latest by failure time).
std::optional<WorkerFailure> lastFailure(const JobStatus& status);
// "exitcode 3: ValueError: boom", "Signal 9 (SIGKILL): hung: no progress reported for 30.0 s".
std::string failureReason(const WorkerFailure& failure);

// The lines `ddprun status` prints; every text from the store escaped (common::printable).
std::string renderText(const JobStatus& status, double now);
// `ddprun status --json`: {"run_id", "state" ("running" or "ended"), "exit_code" (ended only),
// "round", "restarts", "max_restarts", "nodes": [each node's snapshot JSON plus "stale"],
// "last_failure"}.
nlohmann::json renderJson(const JobStatus& status, double now);

}  // namespace ddprun::launcher
