// Incident: one failure of the job as a record, and what it cost: what happened and to whom, its
// class, and the moments of its timeline, each an epoch second:
//
//   failed_at ──> detected_at ──> decided_at ──> running_at ──> progress_at
//   (it happened)  (ddprun knew)   (restart or    (this node's    (the first progress
//                                   end decided)   new group ran)  report after it)
//
// "lost" is failed_at to progress_at (to running_at when no progress was seen: the job has no
// progress channel, or it ended first). An agent keeps the last few (machine/incident_timeline.h),
// its snapshot carries them to `ddprun status` (which merges the agents' records of one failure),
// and each closed record is one `ddprun.incident` event. docs/status.md lists the fields.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/failure_class.h"

namespace ddprun::launcher {

enum class IncidentKind {
  kWorkerFailed,  // a worker exited non-zero or by a signal, or wrote a --fail-pattern line
  kHang,          // a worker was found hung and killed (--hang-timeout, --start-timeout,
                  // --exit-timeout, FileTimer)
  kNodeLost,      // a node's agent vanished
  kNodeLeft,      // a node's agent was stopped by a signal and left the job
  kFenced,        // this node lost the rendezvous and stopped its own workers
  kStoreLost,     // the rendezvous store stopped answering
};

// What the job did about it.
enum class IncidentOutcome {
  kPending,    // not decided yet
  kRestarted,  // the job restarted its workers (a restart spent)
  kReformed,   // the job re-formed without spending a restart (a node lost, left, came back)
  kJobFailed,  // the job ended with it
};

// "worker_failed", "hang", "node_lost", "node_left", "fenced", "store_lost".
const char* incidentKindName(IncidentKind kind);
std::optional<IncidentKind> incidentKindFromName(std::string_view name);
// "pending", "restarted", "reformed", "job_failed".
const char* incidentOutcomeName(IncidentOutcome outcome);
std::optional<IncidentOutcome> incidentOutcomeFromName(std::string_view name);

struct Incident {
  int round = -1;  // the round it stopped
  IncidentKind kind = IncidentKind::kWorkerFailed;
  std::optional<int> rank;  // the failed worker's global rank (a worker's incident)
  int groupRank = -1;       // its node's rank in that round (-1: not known)
  std::string host;         // that node's host name (outside text: escape it where shown)
  std::string detail;       // "exit 1", "SIGKILL", "no progress for 30.0 s" (outside text too)
  std::optional<FailureClass> failureClass;  // once decided
  IncidentOutcome outcome = IncidentOutcome::kPending;
  double failedAt = 0;
  double detectedAt = 0;
  std::optional<double> decidedAt;
  std::optional<double> runningAt;
  std::optional<double> progressAt;
  bool closed = false;  // nothing more will be added to it

  // Seconds from failedAt to progressAt, else to runningAt; nothing before either.
  std::optional<double> lostSeconds() const;
  // Whether `other` is another agent's record of the same failure.
  bool sameFailure(const Incident& other) const;
};

// One line for people (the agent's log, `ddprun status`), its outside text escaped:
// "round 2, worker_failed, rank 1 on host-b (exit 1; worker, restarted): detected +0.00 s,
// decided +0.21 s, running +0.35 s, progress +1.52 s; 1.52 s lost".
std::string incidentText(const Incident& incident);

// {"round", "kind", "rank"?, "group_rank", "host", "detail", "failure_class"?, "outcome",
//  "failed_at", "detected_at", "decided_at"?, "running_at"?, "progress_at"?, "lost_s"?, "closed"}
nlohmann::json toJson(const Incident& incident);
// The inverse; throws std::invalid_argument naming the field of a record that is not one.
Incident incidentFromJson(const nlohmann::json& value);

}  // namespace ddprun::launcher
