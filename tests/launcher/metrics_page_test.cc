// The agent's /metrics page (report/metrics_page.h) from a fixed snapshot and counters: every
// family's HELP and TYPE, torchelastic's run metrics once the run is over, the counts by class and
// kind, the heartbeat ages per running rank, and nothing /healthz may not reveal (no host name,
// address or message). The whole page is parsed by prometheus_client in metrics_test.py.
#include "report/metrics_page.h"

#include <catch2/catch.hpp>
#include <regex>
#include <set>
#include <string>

using namespace ddprun::launcher;

namespace {

AgentSnapshot running() {
  AgentSnapshot snapshot;
  snapshot.runId = "job-7";
  snapshot.round = 2;
  snapshot.restarts = 2;
  snapshot.maxRestarts = 3;
  snapshot.hostname = "secret-host";
  snapshot.address = "10.9.9.9";
  snapshot.groupRank = 0;
  snapshot.nodes = 1;
  snapshot.phase = AgentPhase::kRunning;
  for (int rank = 0; rank < 2; ++rank) {
    WorkerSnapshot worker;
    worker.rank = rank;
    worker.localRank = rank;
    worker.pid = 100 + rank;
    if (rank == 1) worker.lastHeartbeat = 990;
    snapshot.workers.push_back(worker);
  }
  WorkerFailure failure;
  failure.message = "secret message";
  snapshot.lastFailure = failure;
  return snapshot;
}

}  // namespace

TEST_CASE("metrics page: each family typed, the counts by class and kind, the ages per rank",
          "[metrics][unit]") {
  JobMetrics metrics;
  metrics.roundsFormed = 3;
  metrics.restarts[FailureClass::kWorker] = 2;
  metrics.incidents[{IncidentKind::kHang, FailureClass::kWorker}] = 1;
  metrics.incidents[{IncidentKind::kWorkerFailed, std::nullopt}] = 1;
  metrics.lost.observe(4);
  const std::string page = metricsPage(running(), metrics, "trainer", 1000);

  // Every sample's family has a HELP and a TYPE line before it.
  std::set<std::string> typed;
  const std::regex typeLine(R"(# TYPE (\S+) (counter|gauge|histogram))");
  const std::regex sampleLine(R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+))");
  std::size_t samples = 0;
  std::size_t start = 0;
  while (start < page.size()) {
    const std::size_t end = page.find('\n', start);
    const std::string line = page.substr(start, end - start);
    start = end + 1;
    std::smatch match;
    if (std::regex_match(line, match, typeLine)) {
      typed.insert(match[1]);
    } else if (line.rfind("# HELP ", 0) != 0) {
      REQUIRE(std::regex_match(line, match, sampleLine));
      std::string family = match[1];
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string base = family.substr(0, family.size() - std::string(suffix).size());
        if (family.size() > std::string(suffix).size() && family.ends_with(suffix) &&
            typed.count(base))
          family = base;
      }
      CHECK(typed.count(family) == 1);
      ++samples;
    }
  }
  CHECK(samples > 40);

  CHECK_THAT(page, Catch::Contains("torchelastic_workers_run_total{role=\"trainer\"} 0\n"));
  CHECK_THAT(page, Catch::Contains("ddprun_restarts_total{class=\"worker\"} 2\n"));
  CHECK_THAT(page, Catch::Contains("ddprun_restarts_total{class=\"machine\"} 0\n"));
  CHECK_THAT(page, Catch::Contains("ddprun_incidents_total{kind=\"hang\",class=\"worker\"} 1\n"));
  CHECK_THAT(page,
             Catch::Contains("ddprun_incidents_total{kind=\"worker_failed\",class=\"none\"} 1\n"));
  CHECK_THAT(page, Catch::Contains("ddprun_incident_lost_seconds_bucket{le=\"5\"} 1\n"));
  CHECK_THAT(page, Catch::Contains(
                       "ddprun_worker_heartbeat_age_seconds{rank=\"1\",local_rank=\"1\"} 10\n"));
  CHECK_THAT(page, !Catch::Contains("heartbeat_age_seconds{rank=\"0\""));  // none reported yet
  CHECK_THAT(page, Catch::Contains("ddprun_workers{state=\"running\"} 2\n"));
  CHECK_THAT(page, Catch::Contains("ddprun_agent_phase{phase=\"running\"} 1\n"));
  CHECK_THAT(page, Catch::Contains("ddprun_job_restarts 2\n"));
  CHECK_THAT(page, Catch::Contains("ddprun_rounds_formed_total 3\n"));
  // What /healthz may not reveal, /metrics does not either.
  CHECK_THAT(page, !Catch::Contains("secret"));
  CHECK_THAT(page, !Catch::Contains("10.9.9.9"));
}

TEST_CASE("metrics page: torchelastic's run metrics once the run is over", "[metrics][unit]") {
  AgentSnapshot snapshot = running();
  snapshot.phase = AgentPhase::kFinished;
  snapshot.exitCode = 0;
  const std::string succeeded = metricsPage(snapshot, JobMetrics{}, "default", 1000);
  CHECK_THAT(succeeded, Catch::Contains("torchelastic_workers_run_total{role=\"default\"} 1\n"));
  CHECK_THAT(succeeded, Catch::Contains(
                            "torchelastic_workers_run_success_with_retries{role=\"default\"} 1\n"));
  CHECK_THAT(succeeded,
             Catch::Contains("torchelastic_workers_run_success_no_retries{role=\"default\"} 0\n"));
  // 2 of 3 restarts used: 100 - 100 * (1 + 1) / (3 + 1).
  CHECK_THAT(succeeded, Catch::Contains("torchelastic_workers_flakiness{role=\"default\"} 50\n"));
  CHECK_THAT(succeeded, Catch::Contains("ddprun_agent_exit_code 0\n"));
  snapshot.exitCode = 1;
  snapshot.restarts = 0;
  const std::string failed = metricsPage(snapshot, JobMetrics{}, "default", 1000);
  CHECK_THAT(failed,
             Catch::Contains("torchelastic_workers_run_failed_no_retries{role=\"default\"} 1\n"));
  CHECK_THAT(failed, Catch::Contains("torchelastic_workers_flakiness{role=\"default\"} 100\n"));
}
