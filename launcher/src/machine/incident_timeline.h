// IncidentTimeline: the machine's record of each failure of the job (core/incident.h), filled in
// as the agent reaches each moment of it: a round's stop names the failure (its time and its
// detection's come with the failure record), the next step decides, this node's workers start
// again, and the first progress report after that closes it. A record still open when the next
// failure arrives, or when the agent ends, is closed then as it stands. The last kKept records
// are kept (the snapshot carries them to `ddprun status`); each closed record goes to `closed`
// once (the `ddprun.incident` event and a log line), and its durations to JobMetrics.
//
// Pure bookkeeping: times come in as epoch seconds from the machine's loop.
//
// Thread safety: the loop's thread only.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <optional>
#include <string>

#include "core/incident.h"
#include "core/job_metrics.h"
#include "core/stop_reason.h"

namespace ddprun::launcher {

class IncidentTimeline {
 public:
  static constexpr std::size_t kKept = 16;

  // `metrics` must outlive the timeline.
  IncidentTimeline(JobMetrics& metrics, std::function<void(const Incident&)> closed);

  // Round `round` stopped for `stop`, known here at `now`: opens the record of a failure (a
  // worker's, a node lost or left, the store lost). A stop that is no failure (done, a node
  // joined, a signal to this agent) opens none.
  void stopped(const StopReason& stop, int round, double now);
  // This node fenced itself off round `round` (the rendezvous did not answer), at `now`.
  void fenced(int round, double now);
  // What the job does about the open record's failure, decided at `now`.
  void decided(IncidentOutcome outcome, std::optional<FailureClass> failureClass, double now);
  // This node's workers of a new round started at `now`. `progressSeen`: whether progress can
  // be seen (a progress channel): without one the record closes now.
  void running(double now, bool progressSeen);
  // The first progress report after running(), made at `at`: closes the record.
  void progressed(double at);
  // The agent ends at `now`: an open record closes; undecided, it is the job's failure with
  // `failureClass` when the ending is one (else it stays pending).
  void finished(double now, std::optional<FailureClass> failureClass);

  // Since when the open record waits for its first progress report (running, not progressed).
  std::optional<double> awaitingProgressSince() const;
  const std::deque<Incident>& recent() const { return recent_; }

 private:
  Incident* open();
  // A new record, the open one (if any) already closed: its detection counted, the oldest
  // beyond kKept dropped.
  void keep(Incident incident);
  void close();

  JobMetrics& metrics_;
  std::function<void(const Incident&)> closed_;
  std::deque<Incident> recent_;  // oldest first; the open record, if any, is the last
};

}  // namespace ddprun::launcher
