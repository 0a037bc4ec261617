// IncidentTimeline (machine/incident_timeline.h): which stops open a record, one failure told twice
// is one record, what closes a record (first progress; running without a progress channel; the
// next failure; the agent's end) and what each close adds to JobMetrics; the kept records bounded.
// The machine's own use of it (a hang through the restart to the first heartbeat) is in
// agent_machine_test.cc.
#include "machine/incident_timeline.h"

#include <catch2/catch.hpp>
#include <vector>

using namespace ddprun::launcher;

namespace {

WorkerFailure exited(int rank, double at) {
  WorkerFailure failure;
  failure.rank = rank;
  failure.groupRank = 0;
  failure.host = "host-a";
  failure.exitCode = 1;
  failure.observedAt = at;
  return failure;
}

struct Recorded {
  JobMetrics metrics;
  std::vector<Incident> closed;
  IncidentTimeline timeline{metrics, [this](const Incident& i) { closed.push_back(i); }};
};

}  // namespace

TEST_CASE("incidents: a worker's failure through its restart to the first progress",
          "[incident][unit]") {
  Recorded r;
  r.timeline.stopped(StopReason::workerFailed(exited(1, 100), 7), 0, 100.05);
  // This node's own announcement and the store's record of the same failure: one incident.
  r.timeline.stopped(StopReason::workerFailed(exited(1, 100), 7), 0, 100.06);
  REQUIRE(r.timeline.recent().size() == 1);
  r.timeline.decided(IncidentOutcome::kRestarted, FailureClass::kWorker, 100.2);
  r.timeline.running(100.5, /*progressSeen=*/true);
  CHECK(r.timeline.awaitingProgressSince() == 100.5);
  CHECK(r.closed.empty());
  r.timeline.progressed(102);
  REQUIRE(r.closed.size() == 1);
  const Incident& incident = r.closed[0];
  CHECK(incident.failedAt == 100);
  CHECK(incident.detectedAt == 100);  // the agent saw the exit at once
  CHECK(*incident.lostSeconds() == 2);
  CHECK(incident.detail == "exitcode 1");
  CHECK_FALSE(r.timeline.awaitingProgressSince());
  CHECK(r.metrics.incidents.at({IncidentKind::kWorkerFailed, FailureClass::kWorker}) == 1);
  CHECK(r.metrics.recovery.sum() == Approx(0.5));
  CHECK(r.metrics.progress.sum() == Approx(2));
}

TEST_CASE("incidents: a hung worker failed when its silence began", "[incident][unit]") {
  Recorded r;
  WorkerFailure hung = exited(0, 140);
  hung.hang = HangKind::kNoProgress;
  hung.hangDetail = "no progress reported for 30.0 s";
  hung.silentSince = 100;
  hung.hungAt = 130;
  r.timeline.stopped(StopReason::workerFailed(hung, 7), 3, 140.1);
  const Incident& incident = r.timeline.recent().back();
  CHECK(incident.kind == IncidentKind::kHang);
  CHECK(incident.failedAt == 100);
  CHECK(incident.detectedAt == 130);
  CHECK(r.metrics.detection.sum() == Approx(30));
}

TEST_CASE("incidents: what opens none, and what closes one early", "[incident][unit]") {
  Recorded r;
  r.timeline.stopped(StopReason::nodeJoined(3, "host-c"), 0, 10);
  r.timeline.stopped(StopReason::done(), 0, 10);
  r.timeline.stopped(StopReason::signalled(15), 0, 10);
  CHECK(r.timeline.recent().empty());

  // A lost node, re-formed, no progress channel: closed once the workers run.
  r.timeline.stopped(StopReason::nodeLost(3, 1, "host-b"), 1, 20);
  r.timeline.decided(IncidentOutcome::kReformed, FailureClass::kMachine, 20.1);
  r.timeline.running(20.4, /*progressSeen=*/false);
  REQUIRE(r.closed.size() == 1);
  CHECK(*r.closed[0].lostSeconds() == Approx(0.4));

  // The next failure closes one still waiting for progress; the agent's end closes the last.
  r.timeline.stopped(StopReason::workerFailed(exited(0, 30), 1), 2, 30);
  r.timeline.decided(IncidentOutcome::kRestarted, FailureClass::kWorker, 30.1);
  r.timeline.running(31, true);
  r.timeline.stopped(StopReason::workerFailed(exited(1, 40), 1), 3, 40);
  REQUIRE(r.closed.size() == 2);
  CHECK_FALSE(r.closed[1].progressAt);
  r.timeline.finished(41, FailureClass::kUser);
  REQUIRE(r.closed.size() == 3);
  CHECK(r.closed[2].outcome == IncidentOutcome::kJobFailed);
  CHECK(r.closed[2].failureClass == FailureClass::kUser);
}

TEST_CASE("incidents: the last kKept are kept", "[incident][unit]") {
  Recorded r;
  for (int i = 0; i < 40; ++i) {
    r.timeline.stopped(StopReason::workerFailed(exited(i, i), 1), i, i);
    r.timeline.decided(IncidentOutcome::kRestarted, FailureClass::kWorker, i);
  }
  CHECK(r.timeline.recent().size() == IncidentTimeline::kKept);
  CHECK(r.timeline.recent().back().round == 39);
  CHECK(r.closed.size() == 39);
}

TEST_CASE("incidents: a --fail-pattern line is a worker's failure, not a hang",
          "[incident][unit]") {
  Recorded r;
  WorkerFailure failed = exited(1, 50);
  failed.hang = HangKind::kFailPattern;
  failed.hangDetail = "wrote a line matching --fail-pattern 'loss nan': \"loss nan\"";
  failed.hungAt = 49.5;
  r.timeline.stopped(StopReason::workerFailed(failed, 7), 0, 50.1);
  const Incident& incident = r.timeline.recent().back();
  CHECK(incident.kind == IncidentKind::kWorkerFailed);
  CHECK(incident.detail == failed.hangDetail);
  CHECK(incident.failedAt == 49.5);  // the line's arrival: failed and detected at once
  CHECK(incident.detectedAt == 49.5);
}
