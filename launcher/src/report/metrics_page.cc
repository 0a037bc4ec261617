#include "report/metrics_page.h"

#include <algorithm>
#include <array>
#include <string>

#include "ddprun/common/metrics_text.h"

namespace ddprun::launcher {
namespace {

using common::MetricsText;
using common::MetricType;

constexpr std::array kPhases{AgentPhase::kJoining, AgentPhase::kRunning, AgentPhase::kLocalDone,
                             AgentPhase::kStopping, AgentPhase::kFinished};
constexpr std::array kWorkerStates{WorkerState::kRunning, WorkerState::kSucceeded,
                                   WorkerState::kFailed, WorkerState::kHung, WorkerState::kStopped};
constexpr std::array kClasses{FailureClass::kWorker, FailureClass::kUser, FailureClass::kMachine,
                              FailureClass::kStopped};

// torchelastic's run metrics, recorded once the run is over (as its agent records them when run()
// returns): 0 before.
void torchelasticRun(MetricsText& text, const AgentSnapshot& snapshot, std::string_view role) {
  const bool over = snapshot.exitCode.has_value();
  const bool failed = over && *snapshot.exitCode != 0;
  const bool retried = snapshot.restarts > 0;
  const auto counter = [&](const char* name, const char* help, bool value) {
    text.family(name, MetricType::kCounter, help);
    text.sample(value ? 1 : 0, {{"role", role}});
  };
  counter("torchelastic_workers_run_total", "Runs of the worker group ended (torchelastic's)",
          over);
  counter("torchelastic_workers_run_success_with_retries",
          "Runs that succeeded after restarts (torchelastic's)", over && !failed && retried);
  counter("torchelastic_workers_run_success_no_retries",
          "Runs that succeeded with no restart (torchelastic's)", over && !failed && !retried);
  counter("torchelastic_workers_run_failed_with_retries",
          "Runs that failed after restarts (torchelastic's)", failed && retried);
  counter("torchelastic_workers_run_failed_no_retries",
          "Runs that failed with no restart (torchelastic's)", failed && !retried);
  // torchelastic's flakiness: 100 for a failed run, else the share of the restart budget used,
  // counting the run itself: 100 - 100 * (remaining + 1) / (max + 1).
  text.family("torchelastic_workers_flakiness", MetricType::kGauge,
              "Share of the restart budget the run used, 100 when it failed (torchelastic's; set "
              "once the run is over)");
  if (over) {
    const int remaining = std::max(0, snapshot.maxRestarts - snapshot.restarts);
    const double flakiness =
        failed ? 100.0 : 100.0 - 100.0 * (remaining + 1) / (snapshot.maxRestarts + 1);
    text.sample(static_cast<int>(flakiness), {{"role", role}});
  }
}

void incidents(MetricsText& text, const JobMetrics& metrics) {
  text.family("ddprun_incidents_total", MetricType::kCounter,
              "Failures of the job this agent recorded, once closed, by kind and failure class "
              "(class \"none\": the agent ended before deciding)");
  for (const auto& [key, count] : metrics.incidents) {
    text.sample(count, {{"kind", incidentKindName(key.first)},
                        {"class", key.second ? failureClassName(*key.second) : "none"}});
  }
  text.family("ddprun_incident_detection_seconds", MetricType::kHistogram,
              "Per incident, seconds from the failure (a hung worker's last progress) to its "
              "detection");
  text.histogram(metrics.detection);
  text.family("ddprun_incident_recovery_seconds", MetricType::kHistogram,
              "Per incident, seconds from the failure to this node's new worker group running");
  text.histogram(metrics.recovery);
  text.family("ddprun_incident_progress_seconds", MetricType::kHistogram,
              "Per incident, seconds from the failure to the first progress report after the "
              "restart (a heartbeat)");
  text.histogram(metrics.progress);
  text.family("ddprun_incident_lost_seconds", MetricType::kHistogram,
              "Per incident, seconds lost: from the failure to the first progress after it (to "
              "the group running when no progress is reported)");
  text.histogram(metrics.lost);
}

void workers(MetricsText& text, const AgentSnapshot& snapshot, double now) {
  text.family("ddprun_workers", MetricType::kGauge,
              "This node's workers of the current (or last) round, by state");
  for (const WorkerState state : kWorkerStates) {
    const auto count = std::count_if(snapshot.workers.begin(), snapshot.workers.end(),
                                     [&](const WorkerSnapshot& w) { return w.state == state; });
    text.sample(static_cast<double>(count), {{"state", workerStateName(state)}});
  }
  text.family("ddprun_worker_heartbeat_age_seconds", MetricType::kGauge,
              "Per running worker that reported progress, seconds since its last report");
  for (const WorkerSnapshot& worker : snapshot.workers) {
    if (!worker.lastHeartbeat || worker.state != WorkerState::kRunning) continue;
    const std::string rank = std::to_string(worker.rank);
    const std::string localRank = std::to_string(worker.localRank);
    text.sample(std::max(0.0, now - *worker.lastHeartbeat),
                {{"rank", rank}, {"local_rank", localRank}});
  }
}

}  // namespace

std::string metricsPage(const AgentSnapshot& snapshot, const JobMetrics& metrics,
                        std::string_view role, double now,
                        const std::vector<rendezvous::LabelledStats>& stores) {
  MetricsText text;
  torchelasticRun(text, snapshot, role);

  text.family("ddprun_agent_info", MetricType::kGauge,
              "Always 1; the run id and the role as labels");
  text.sample(1, {{"run_id", snapshot.runId}, {"role", role}});
  text.family("ddprun_agent_phase", MetricType::kGauge,
              "1 for the agent's phase, 0 for the others");
  for (const AgentPhase phase : kPhases) {
    text.sample(snapshot.phase == phase ? 1 : 0, {{"phase", agentPhaseName(phase)}});
  }
  text.single("ddprun_agent_healthy", MetricType::kGauge,
              "1 when /healthz answers 200 (no worker hung, not stopping or finished)",
              healthy(snapshot) ? 1 : 0);
  text.single("ddprun_agent_start_time_seconds", MetricType::kGauge,
              "The agent's start, seconds since the epoch", snapshot.startedAt);
  if (snapshot.exitCode) {
    text.single("ddprun_agent_exit_code", MetricType::kGauge,
                "The agent's exit code, once finished", *snapshot.exitCode);
  }

  text.single("ddprun_round", MetricType::kGauge, "The round this node is in or joining (-1: none)",
              snapshot.round);
  text.single("ddprun_nodes", MetricType::kGauge, "Nodes in the current round", snapshot.nodes);
  text.single("ddprun_group_rank", MetricType::kGauge, "This node's rank in the round (-1: none)",
              snapshot.groupRank);
  text.single("ddprun_rounds_formed_total", MetricType::kCounter, "Rounds this node took part in",
              metrics.roundsFormed);
  text.family("ddprun_round_formation_seconds", MetricType::kHistogram,
              "Seconds from this node's join to its round's forming");
  text.histogram(metrics.roundFormation);

  text.single("ddprun_job_restarts", MetricType::kGauge,
              "Restarts the job has spent (its budget is job-wide, the same on every node)",
              snapshot.restarts);
  text.single("ddprun_job_max_restarts", MetricType::kGauge, "--max-restarts",
              snapshot.maxRestarts);
  text.family("ddprun_restarts_total", MetricType::kCounter,
              "Restarts this node took part in, by the failure's class");
  for (const FailureClass failureClass : kClasses) {
    const auto it = metrics.restarts.find(failureClass);
    text.sample(it == metrics.restarts.end() ? 0 : it->second,
                {{"class", failureClassName(failureClass)}});
  }
  incidents(text, metrics);
  workers(text, snapshot, now);

  text.single("ddprun_health_exclusions_total", MetricType::kCounter,
              "Times the health gate kept this node out of a round", snapshot.exclusions);
  text.single("ddprun_spare", MetricType::kGauge,
              "1 while this agent is a spare waiting for a place (sum over agents: the pool)",
              snapshot.spare ? 1 : 0);
  text.single("ddprun_spares_wanted", MetricType::kGauge, "--spares", snapshot.sparesWanted);
  if (!stores.empty()) rendezvous::storeMetrics(text, stores);
  return text.take();
}

}  // namespace ddprun::launcher
