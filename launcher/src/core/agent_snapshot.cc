#include "core/agent_snapshot.h"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

#include "core/json_fields.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher {
namespace {

using nlohmann::json;

constexpr AgentPhase kPhases[] = {AgentPhase::kJoining, AgentPhase::kRunning,
                                  AgentPhase::kLocalDone, AgentPhase::kStopping,
                                  AgentPhase::kFinished};
constexpr WorkerState kWorkerStates[] = {WorkerState::kRunning, WorkerState::kSucceeded,
                                         WorkerState::kFailed, WorkerState::kHung,
                                         WorkerState::kStopped};

constexpr std::string_view kRecord = "the snapshot";

template <typename T>
T field(const json& value, const char* key) {
  return jsonField<T>(value, key, kRecord);
}

template <typename T>
std::optional<T> optionalField(const json& value, const char* key) {
  return optionalJsonField<T>(value, key, kRecord);
}

json workerJson(const WorkerSnapshot& worker) {
  json value{{"rank", worker.rank},
             {"local_rank", worker.localRank},
             {"pid", worker.pid},
             {"state", workerStateName(worker.state)},
             {"started_at", worker.startedAt}};
  if (worker.lastHeartbeat) value["last_heartbeat"] = *worker.lastHeartbeat;
  if (worker.exitCode) value["exit_code"] = *worker.exitCode;
  return value;
}

WorkerSnapshot workerFromJson(const json& value) {
  if (!value.is_object()) throw std::invalid_argument("a snapshot's worker must be a JSON object");
  WorkerSnapshot worker;
  worker.rank = field<int>(value, "rank");
  worker.localRank = field<int>(value, "local_rank");
  worker.pid = field<long>(value, "pid");
  const auto state = workerStateFromName(field<std::string>(value, "state"));
  if (!state) throw std::invalid_argument("a snapshot's worker has an unknown state");
  worker.state = *state;
  worker.startedAt = field<double>(value, "started_at");
  worker.lastHeartbeat = optionalField<double>(value, "last_heartbeat");
  worker.exitCode = optionalField<int>(value, "exit_code");
  return worker;
}

}  // namespace

const char* agentPhaseName(AgentPhase phase) {
  switch (phase) {
    case AgentPhase::kJoining:
      return "joining";
    case AgentPhase::kRunning:
      return "running";
    case AgentPhase::kLocalDone:
      return "local_done";
    case AgentPhase::kStopping:
      return "stopping";
    case AgentPhase::kFinished:
      return "finished";
  }
  return "joining";
}

std::optional<AgentPhase> agentPhaseFromName(std::string_view name) {
  for (AgentPhase phase : kPhases) {
    if (name == agentPhaseName(phase)) return phase;
  }
  return std::nullopt;
}

const char* workerStateName(WorkerState state) {
  switch (state) {
    case WorkerState::kRunning:
      return "running";
    case WorkerState::kSucceeded:
      return "succeeded";
    case WorkerState::kFailed:
      return "failed";
    case WorkerState::kHung:
      return "hung";
    case WorkerState::kStopped:
      return "stopped";
  }
  return "running";
}

std::optional<WorkerState> workerStateFromName(std::string_view name) {
  for (WorkerState state : kWorkerStates) {
    if (name == workerStateName(state)) return state;
  }
  return std::nullopt;
}

bool healthy(const AgentSnapshot& snapshot) {
  if (snapshot.phase == AgentPhase::kStopping || snapshot.phase == AgentPhase::kFinished)
    return false;
  for (const WorkerSnapshot& worker : snapshot.workers) {
    if (worker.state == WorkerState::kHung) return false;
  }
  return true;
}

json toJson(const AgentSnapshot& snapshot) {
  json workers = json::array();
  for (const WorkerSnapshot& worker : snapshot.workers) workers.push_back(workerJson(worker));
  json value{{"run_id", snapshot.runId},        {"round", snapshot.round},
             {"restarts", snapshot.restarts},   {"max_restarts", snapshot.maxRestarts},
             {"addr", snapshot.address},        {"hostname", snapshot.hostname},
             {"agent_pid", snapshot.agentPid},  {"group_rank", snapshot.groupRank},
             {"nodes", snapshot.nodes},         {"state", agentPhaseName(snapshot.phase)},
             {"healthy", healthy(snapshot)},    {"workers", std::move(workers)},
             {"last_failure", nullptr},         {"started_at", snapshot.startedAt},
             {"updated_at", snapshot.updatedAt}};
  if (snapshot.lastFailure) {
    WorkerFailure shortForm = *snapshot.lastFailure;
    shortForm.traceback.clear();
    shortForm.stack.clear();
    shortForm.stderrTail.clear();
    value["last_failure"] = toJson(shortForm);
  }
  if (snapshot.lastFailureClass)
    value["failure_class"] = failureClassName(*snapshot.lastFailureClass);
  if (snapshot.restartAt) value["restart_at"] = *snapshot.restartAt;
  if (snapshot.leftOut) value["left_out"] = common::validUtf8(*snapshot.leftOut);
  if (snapshot.exclusions > 0) value["exclusions"] = snapshot.exclusions;
  if (snapshot.lastExclusion) value["last_exclusion"] = common::validUtf8(*snapshot.lastExclusion);
  if (snapshot.healthRetryAt) value["health_retry_at"] = *snapshot.healthRetryAt;
  if (snapshot.spare) value["spare"] = true;
  if (snapshot.sparesWanted != 0) value["spares_wanted"] = snapshot.sparesWanted;
  if (!snapshot.incidents.empty()) {
    json incidents = json::array();
    for (const Incident& incident : snapshot.incidents) incidents.push_back(toJson(incident));
    value["incidents"] = std::move(incidents);
  }
  if (snapshot.exitCode) value["exit_code"] = *snapshot.exitCode;
  return value;
}

json toHealthJson(const AgentSnapshot& snapshot) {
  json workers = json::array();
  for (const WorkerSnapshot& worker : snapshot.workers) workers.push_back(workerJson(worker));
  json value{{"run_id", snapshot.runId},        {"round", snapshot.round},
             {"restarts", snapshot.restarts},   {"max_restarts", snapshot.maxRestarts},
             {"agent_pid", snapshot.agentPid},  {"group_rank", snapshot.groupRank},
             {"nodes", snapshot.nodes},         {"state", agentPhaseName(snapshot.phase)},
             {"healthy", healthy(snapshot)},    {"workers", std::move(workers)},
             {"last_failure", nullptr},         {"started_at", snapshot.startedAt},
             {"updated_at", snapshot.updatedAt}};
  if (const auto& failure = snapshot.lastFailure) {
    value["last_failure"] = json{{"rank", failure->rank},
                                 {"local_rank", failure->localRank},
                                 {"group_rank", failure->groupRank},
                                 {"exit_code", exitCodeOf(*failure)},
                                 {"signal", failure->signal},
                                 {"observed_at", failure->observedAt},
                                 {"hang", hangKindName(failure->hang)},
                                 {"oom", !failure->oom.empty()}};
  }
  // The health gate's exclusions: the count and the time, not the reason (a hook's words).
  value["exclusions"] = snapshot.exclusions;
  if (snapshot.healthRetryAt) value["health_retry_at"] = *snapshot.healthRetryAt;
  if (snapshot.spare) value["spare"] = true;
  if (snapshot.exitCode) value["exit_code"] = *snapshot.exitCode;
  return value;
}

AgentSnapshot agentSnapshotFromJson(const json& value) {
  if (!value.is_object()) throw std::invalid_argument("a snapshot must be a JSON object");
  AgentSnapshot snapshot;
  snapshot.runId = field<std::string>(value, "run_id");
  snapshot.round = field<int>(value, "round");
  snapshot.restarts = field<int>(value, "restarts");
  snapshot.maxRestarts = field<int>(value, "max_restarts");
  snapshot.address = field<std::string>(value, "addr");
  snapshot.hostname = field<std::string>(value, "hostname");
  snapshot.agentPid = field<long>(value, "agent_pid");
  snapshot.groupRank = field<int>(value, "group_rank");
  snapshot.nodes = field<int>(value, "nodes");
  const auto phase = agentPhaseFromName(field<std::string>(value, "state"));
  if (!phase) throw std::invalid_argument("the snapshot's 'state' is not an agent state");
  snapshot.phase = *phase;
  const json workers = field<json>(value, "workers");
  if (!workers.is_array()) throw std::invalid_argument("the snapshot's 'workers' is not a list");
  for (const json& worker : workers) snapshot.workers.push_back(workerFromJson(worker));
  if (const auto failure = value.find("last_failure");
      failure != value.end() && !failure->is_null()) {
    try {
      snapshot.lastFailure = failureFromJson(*failure);
    } catch (const json::exception&) {
      throw std::invalid_argument("the snapshot's 'last_failure' is not a worker failure");
    }
  }
  if (const auto name = optionalField<std::string>(value, "failure_class")) {
    snapshot.lastFailureClass = failureClassFromName(*name);
    if (!snapshot.lastFailureClass)
      throw std::invalid_argument("the snapshot's 'failure_class' is not a failure class");
  }
  snapshot.restartAt = optionalField<double>(value, "restart_at");
  snapshot.leftOut = optionalField<std::string>(value, "left_out");
  snapshot.exclusions = optionalField<int>(value, "exclusions").value_or(0);
  snapshot.lastExclusion = optionalField<std::string>(value, "last_exclusion");
  snapshot.healthRetryAt = optionalField<double>(value, "health_retry_at");
  snapshot.spare = optionalField<bool>(value, "spare").value_or(false);
  snapshot.sparesWanted = optionalField<int>(value, "spares_wanted").value_or(0);
  if (snapshot.sparesWanted < 0)
    throw std::invalid_argument("the snapshot's 'spares_wanted' is negative");
  if (const auto incidents = value.find("incidents"); incidents != value.end()) {
    if (!incidents->is_array())
      throw std::invalid_argument("the snapshot's 'incidents' must be a JSON array");
    for (const json& incident : *incidents)
      snapshot.incidents.push_back(incidentFromJson(incident));
  }
  snapshot.exitCode = optionalField<int>(value, "exit_code");
  snapshot.startedAt = field<double>(value, "started_at");
  snapshot.updatedAt = field<double>(value, "updated_at");
  return snapshot;
}

}  // namespace ddprun::launcher
