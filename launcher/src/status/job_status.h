// JobStatus: what `ddprun status` shows of a job, made from every node's AgentSnapshot (the one
// form core/agent_snapshot.h defines, as each agent published it in the rendezvous), and its two
// renderings: the text for people and the JSON object for programs. Pure: the clock is passed in,
// so the unit tests render fixed snapshots.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

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

// A key under the run's status prefix whose value is not shown, and why: one node's problem,
// never the job's (the other nodes are shown).
struct UnreadableKey {
  enum class Why {
    kNotASnapshot,  // not JSON, or not a snapshot: another version's, or something else's
    kTooLarge,      // over kMaxSnapshotBytes: no agent writes that, and it is not read whole
  };
  std::string key;
  Why why = Why::kNotASnapshot;
  std::uint64_t bytes = 0;  // kTooLarge: the value's size, as the store gave it
};

// What the round records (membership/membership_keys.h) say of a job none of whose nodes has
// published a snapshot yet: the first second of a job, between its agents' joining and their
// first snapshot.
struct RoundRecords {
  std::optional<int> round;  // the job's current round; none: no round begun yet
  // The round's joiners (its member slots), or, once formed, its members (the close record's).
  std::size_t joined = 0;
  bool formed = false;         // the round's close record is there: its workers are starting
  int restarts = 0;            // the close record's
  std::size_t registered = 0;  // node records: agents that registered, in any round
  bool atLeast = false;        // a count stopped at a listing's limit: there are more
};

struct JobStatus {
  std::string runId;
  // Every node's snapshot, by group rank (nodes without one last), then address.
  std::vector<AgentSnapshot> nodes;
  // Keys under the run's status prefix whose value is not shown, by name.
  std::vector<UnreadableKey> unreadable;
  // Read only when no node's snapshot is there: the round records, if any.
  std::optional<RoundRecords> records;
};

// Sorts `nodes` as JobStatus keeps them, leaving out those of an earlier run of the same run id
// (finished before any node still active started: a store that outlives its jobs keeps them).
JobStatus jobStatusOf(std::string runId, std::vector<AgentSnapshot> nodes);

// The job's spares (--spares): the agents waiting for a place (not stale, by host name) and the
// count the job wants (the largest any node says). Fewer than wanted is shown, never an error.
struct SparePool {
  int wanted = 0;
  std::vector<std::string> waiting;  // their host names, as published
};
SparePool sparePool(const JobStatus& status, double now);

// Every node has finished (and there is at least one).
bool ended(const JobStatus& status);
// The job's exit code once ended: 0 when every node exited 0, else the first other node's (by
// group rank): the agents of a failed job all exit with the root cause's code.
int outcomeCode(const JobStatus& status);
// The last worker failure any node knows of (the latest by failure time), and the node whose
// snapshot holds it (the first of those that do; nullptr when none has a failure).
std::optional<WorkerFailure> lastFailure(const JobStatus& status);
const AgentSnapshot* lastFailedNode(const JobStatus& status);
// The job's incidents as its nodes recorded them, one record per failure, oldest first, at most
// kShownIncidents: the nodes' records of one failure merged (failed, detected, decided and first
// progress at the earliest node's; running again at the latest node's, since the group runs once
// every node's workers do; closed once every node's record is).
inline constexpr std::size_t kShownIncidents = 16;
std::vector<Incident> jobIncidents(const JobStatus& status);
// "exitcode 3: ValueError: boom", "Signal 9 (SIGKILL): hung: no progress reported for 30.0 s".
std::string failureReason(const WorkerFailure& failure);

// The lines `ddprun status` prints; every text from the store escaped (common::printable).
std::string renderText(const JobStatus& status, double now);
// `ddprun status --json`: {"run_id", "state" ("running" or "ended"; before any snapshot, from the
// round records: "joining", "forming" or "starting"), "exit_code" (ended only), "round",
// "restarts", "max_restarts" (null before any snapshot), "joined" (round records only), "nodes":
// [each node's snapshot JSON plus "stale"], "spares": {"wanted", "waiting", "hosts"} (sparePool),
// "incidents": [jobIncidents, core/incident.h's form], "last_failure", "unreadable": [{"key",
// "reason" ("too_large" or "not_a_snapshot"), "bytes" (too_large only)}]}.
nlohmann::json renderJson(const JobStatus& status, double now);
// renderJson's one-line text as `ddprun status --json` prints it: valid JSON of the same value,
// with no control or bidi character raw (common::printableJson).
std::string renderJsonText(const JobStatus& status, double now);

}  // namespace ddprun::launcher
