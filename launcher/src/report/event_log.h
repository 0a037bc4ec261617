// --event-log-handler console: the agent's worker events as JSON lines on stderr, in torchrun's
// Event form ({"name", "source", "timestamp", "metadata"}) with its names where torchrun has them:
//   torchelastic.worker.status.HEALTHY    a worker started
//   torchelastic.worker.status.SUCCEEDED  a worker exited 0
//   torchelastic.worker.status.FAILED     a worker failed (metadata.raw_error: the failure)
//   torchelastic.worker.status.UNHEALTHY  a worker was found hung (before its stacks are taken)
//   ddprun.worker_group.restart           the group restarts after a failure (torchrun has none)
//   ddprun.incident                       a failure's timeline, once closed (core/incident.h's
//                                         JSON as the metadata; state INCIDENT)
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace ddprun::launcher {

// What one worker event says; the agent fills it.
struct WorkerEvent {
  std::string name;               // as above
  std::string source = "WORKER";  // WORKER or AGENT (torchrun's EventSource)
  double timestamp = 0;           // epoch seconds
  std::string runId;
  std::optional<int> rank;  // global rank (nothing for an agent event)
  int groupRank = 0;
  std::optional<long> pid;  // torchrun's worker_id
  int localRank = -1;
  std::string role;
  std::string hostname;
  std::string state;        // HEALTHY, SUCCEEDED, FAILED, UNHEALTHY, RESTARTING
  double totalRunTime = 0;  // seconds since the agent started
  std::string rdzvBackend;
  int restarts = 0;                                 // agent_restarts: restarts of the job so far
  nlohmann::json rawError;                          // the failure (null when none)
  nlohmann::json extra = nlohmann::json::object();  // ddprun's additions (why it hung...)
};

// One JSON line, newline included.
std::string eventLine(const WorkerEvent& event);

}  // namespace ddprun::launcher
