#include "machine/incident_timeline.h"

#include <utility>

#include "ddprun/common/signal_names.h"
#include "report/failure_report.h"

namespace ddprun::launcher {
namespace {

// The failure's own record: when it happened and when it was found, on the failing node's clock.
Incident workerIncident(const WorkerFailure& failure, int round, double now) {
  Incident incident;
  incident.round = round;
  // A --fail-pattern line is the user's verdict that the worker failed, not a hang.
  const bool hung = failure.hang != HangKind::kNone && failure.hang != HangKind::kFailPattern;
  incident.kind = hung ? IncidentKind::kHang : IncidentKind::kWorkerFailed;
  incident.rank = failure.rank;
  incident.groupRank = failure.groupRank;
  incident.host = failure.host;
  incident.detail = failure.hang != HangKind::kNone ? failure.hangDetail : statusText(failure);
  // A hung worker failed when its silence began, and was found when the rule fired; a worker that
  // ended failed as it ended, and the agent saw that at once (SIGCHLD).
  incident.detectedAt = failure.hungAt.value_or(failure.observedAt > 0 ? failure.observedAt : now);
  incident.failedAt = failure.silentSince.value_or(incident.detectedAt);
  return incident;
}

}  // namespace

IncidentTimeline::IncidentTimeline(JobMetrics& metrics, std::function<void(const Incident&)> closed)
    : metrics_(metrics), closed_(std::move(closed)) {}

Incident* IncidentTimeline::open() {
  if (recent_.empty() || recent_.back().closed) return nullptr;
  return &recent_.back();
}

void IncidentTimeline::stopped(const StopReason& stop, int round, double now) {
  Incident incident;
  switch (stop.kind) {
    case StopKind::kWorkerFailed:
      if (!stop.failure) return;
      incident = workerIncident(*stop.failure, round, now);
      break;
    case StopKind::kNodeLost:
    case StopKind::kNodeLeft:
    case StopKind::kStoreLost:
      incident.round = round;
      incident.kind = stop.kind == StopKind::kNodeLost   ? IncidentKind::kNodeLost
                      : stop.kind == StopKind::kNodeLeft ? IncidentKind::kNodeLeft
                                                         : IncidentKind::kStoreLost;
      incident.groupRank = stop.groupRank;
      incident.host = stop.host;
      incident.detail = stop.kind == StopKind::kNodeLeft
                            ? "stopped by " + common::signalName(stop.signal)
                        : stop.kind == StopKind::kNodeLost ? std::string("its agent vanished")
                                                           : stop.detail;
      // When another node vanished is known to nobody: it is counted from its detection.
      incident.failedAt = now;
      incident.detectedAt = now;
      break;
    default:
      return;
  }
  if (Incident* last = open(); last != nullptr) {
    // The same failure told twice (this node's own announcement and the store's record of it)
    // is one incident.
    if (last->sameFailure(incident) && !last->decidedAt) return;
    close();
  }
  keep(std::move(incident));
}

void IncidentTimeline::fenced(int round, double now) {
  if (open() != nullptr) close();
  Incident incident;
  incident.round = round;
  incident.kind = IncidentKind::kFenced;
  incident.detail = "no answer from the rendezvous store";
  incident.failedAt = now;
  incident.detectedAt = now;
  keep(std::move(incident));
}

void IncidentTimeline::keep(Incident incident) {
  metrics_.detection.observe(incident.detectedAt - incident.failedAt);
  recent_.push_back(std::move(incident));
  while (recent_.size() > kKept) recent_.pop_front();
}

void IncidentTimeline::decided(IncidentOutcome outcome, std::optional<FailureClass> failureClass,
                               double now) {
  Incident* incident = open();
  if (incident == nullptr || incident->decidedAt) return;
  incident->outcome = outcome;
  incident->failureClass = failureClass;
  incident->decidedAt = now;
  if (outcome == IncidentOutcome::kJobFailed) close();
}

void IncidentTimeline::running(double now, bool progressSeen) {
  Incident* incident = open();
  if (incident == nullptr || incident->runningAt) return;
  incident->runningAt = now;
  metrics_.recovery.observe(now - incident->failedAt);
  if (!progressSeen) close();
}

void IncidentTimeline::progressed(double at) {
  Incident* incident = open();
  if (incident == nullptr || !incident->runningAt || incident->progressAt) return;
  incident->progressAt = at;
  metrics_.progress.observe(at - incident->failedAt);
  close();
}

void IncidentTimeline::finished(double now, std::optional<FailureClass> failureClass) {
  Incident* incident = open();
  if (incident == nullptr) return;
  if (!incident->decidedAt && failureClass) {
    incident->outcome = IncidentOutcome::kJobFailed;
    incident->failureClass = failureClass;
    incident->decidedAt = now;
  }
  close();
}

std::optional<double> IncidentTimeline::awaitingProgressSince() const {
  if (recent_.empty() || recent_.back().closed || recent_.back().progressAt) return std::nullopt;
  return recent_.back().runningAt;
}

void IncidentTimeline::close() {
  Incident& incident = recent_.back();
  incident.closed = true;
  ++metrics_.incidents[{incident.kind, incident.failureClass}];
  if (const auto lost = incident.lostSeconds()) metrics_.lost.observe(*lost);
  if (closed_) closed_(incident);
}

}  // namespace ddprun::launcher
