#include "status/job_status.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "ddprun/common/shown_key.h"
#include "ddprun/common/text.h"
#include "membership/status_publisher.h"
#include "report/failure_report.h"

namespace ddprun::launcher {
namespace {

using common::printable;

bool stale(const AgentSnapshot& node, double now) {
  return node.phase != AgentPhase::kFinished && now - node.updatedAt > kStaleSeconds;
}

int round(const JobStatus& status) {
  int round = -1;
  for (const AgentSnapshot& node : status.nodes) round = std::max(round, node.round);
  return round;
}

int restarts(const JobStatus& status) {
  int restarts = 0;
  for (const AgentSnapshot& node : status.nodes) restarts = std::max(restarts, node.restarts);
  return restarts;
}

int maxRestarts(const JobStatus& status) {
  return status.nodes.empty() ? 0 : status.nodes.front().maxRestarts;
}

// "12 s", "3 min 4 s", "2 h 5 min": how long ago, or for how long.
std::string span(double seconds) {
  const long whole = std::lround(std::max(0.0, seconds));
  if (whole < 60) return fmt::format("{} s", whole);
  if (whole < 3600) return fmt::format("{} min {} s", whole / 60, whole % 60);
  return fmt::format("{} h {} min", whole / 3600, (whole % 3600) / 60);
}

std::string workerLine(const WorkerSnapshot& worker, double now) {
  std::string line = fmt::format("  rank {} (local {}): ", worker.rank, worker.localRank);
  if (worker.pid < 0) {
    line += fmt::format("{}, could not be started", workerStateName(worker.state));
    return line;
  }
  line += fmt::format("pid {}, {}", worker.pid, workerStateName(worker.state));
  if (worker.exitCode) line += fmt::format(" (exit code {})", *worker.exitCode);
  line += fmt::format(", started {} ago", span(now - worker.startedAt));
  if (worker.lastHeartbeat)
    line += fmt::format(", last heartbeat {} ago", span(now - *worker.lastHeartbeat));
  return line;
}

std::string nodeLine(const AgentSnapshot& node, double now) {
  const std::string rank = node.groupRank >= 0 ? fmt::format("node {}", node.groupRank)
                           : node.spare        ? "spare"
                                               : "node (no rank yet)";
  std::string line =
      fmt::format("{} on {} ({}), agent pid {}: {}", rank, printable(node.hostname),
                  printable(node.address), node.agentPid, agentPhaseName(node.phase));
  if (node.exitCode) line += fmt::format(", exit code {}", *node.exitCode);
  if (stale(node, now)) {
    line += fmt::format(" (no update for {}: the agent may be gone)", span(now - node.updatedAt));
  }
  return line;
}

// "2 nodes", "1 node", "4096+ nodes" (a count that stopped at a listing's limit).
std::string nodeCount(std::size_t count, bool atLeast) {
  return fmt::format("{}{} node{}", count, atLeast ? "+" : "", count == 1 && !atLeast ? "" : "s");
}

// The job as its round records say, before any node published a snapshot: "joining",
// "forming" (a round that collects its joiners) or "starting" (formed: its workers start).
const char* recordsState(const RoundRecords& records) {
  if (!records.round) return "joining";
  return records.formed ? "starting" : "forming";
}

// "job 'x': round 0 forming, 1 node joined, no status published yet".
std::string recordsLine(const std::string& run, const RoundRecords& records) {
  if (!records.round) {
    return fmt::format("job '{}': joining, {} registered, no round yet, no status published yet",
                       run, nodeCount(records.registered, records.atLeast));
  }
  return fmt::format(
      "job '{}': round {} {}{}, {} joined, no status published yet", run, *records.round,
      recordsState(records),
      records.restarts > 0 ? fmt::format(" (restarts {})", records.restarts) : std::string(),
      nodeCount(records.joined, records.atLeast));
}

// The key is anyone's who reaches the store: shown as common::shownKey shows keys.
std::string unreadableLine(const UnreadableKey& key) {
  if (key.why == UnreadableKey::Why::kTooLarge) {
    return fmt::format("(not shown: {} holds {} bytes, too large for a snapshot (at most {}))",
                       common::shownKey(key.key), key.bytes, kMaxSnapshotBytes);
  }
  return fmt::format("(not shown: {} holds no snapshot this ddprun can read)",
                     common::shownKey(key.key));
}

// "spares: 1 waiting (host-c), 1 wanted"; nothing for a job that wants none and has none.
std::optional<std::string> sparesLine(const SparePool& pool) {
  if (pool.wanted == 0 && pool.waiting.empty()) return std::nullopt;
  std::vector<std::string> hosts;
  for (const std::string& host : pool.waiting) hosts.push_back(printable(host));
  const int waiting = static_cast<int>(pool.waiting.size());
  return fmt::format("spares: {} waiting{}, {} wanted{}", waiting,
                     hosts.empty() ? "" : fmt::format(" ({})", fmt::join(hosts, ", ")), pool.wanted,
                     waiting < pool.wanted ? " (fewer than wanted)" : "");
}

bool activeNode(const AgentSnapshot& node) { return !node.spare; }

}  // namespace

SparePool sparePool(const JobStatus& status, double now) {
  SparePool pool;
  for (const AgentSnapshot& node : status.nodes) {
    pool.wanted = std::max(pool.wanted, node.sparesWanted);
    if (node.spare && node.phase == AgentPhase::kJoining && !stale(node, now))
      pool.waiting.push_back(node.hostname);
  }
  return pool;
}

JobStatus jobStatusOf(std::string runId, std::vector<AgentSnapshot> nodes) {
  // A store that outlives its jobs (ddprun-rendezvous) keeps the final snapshots of an earlier
  // job run under the same run id: nodes that finished before any agent now active started
  // belong to that one, not to this job.
  double earliestActive = -1;
  for (const AgentSnapshot& node : nodes) {
    if (node.phase != AgentPhase::kFinished &&
        (earliestActive < 0 || node.startedAt < earliestActive)) {
      earliestActive = node.startedAt;
    }
  }
  if (earliestActive >= 0) {
    std::erase_if(nodes, [&](const AgentSnapshot& node) {
      return node.phase == AgentPhase::kFinished && node.updatedAt < earliestActive;
    });
  }
  std::stable_sort(nodes.begin(), nodes.end(), [](const AgentSnapshot& a, const AgentSnapshot& b) {
    const auto key = [](const AgentSnapshot& node) {
      return std::pair(node.groupRank < 0 ? 1 : 0, node.groupRank);
    };
    if (key(a) != key(b)) return key(a) < key(b);
    return a.address < b.address;
  });
  return JobStatus{std::move(runId), std::move(nodes), {}, std::nullopt};
}

bool ended(const JobStatus& status) {
  return !status.nodes.empty() &&
         std::all_of(status.nodes.begin(), status.nodes.end(),
                     [](const AgentSnapshot& node) { return node.phase == AgentPhase::kFinished; });
}

int outcomeCode(const JobStatus& status) {
  for (const AgentSnapshot& node : status.nodes) {
    if (node.exitCode.value_or(0) != 0) return *node.exitCode;
  }
  return 0;
}

const AgentSnapshot* lastFailedNode(const JobStatus& status) {
  const AgentSnapshot* last = nullptr;
  for (const AgentSnapshot& node : status.nodes) {
    if (node.lastFailure &&
        (last == nullptr || failureTime(*node.lastFailure) > failureTime(*last->lastFailure))) {
      last = &node;
    }
  }
  return last;
}

std::optional<WorkerFailure> lastFailure(const JobStatus& status) {
  const AgentSnapshot* node = lastFailedNode(status);
  if (node == nullptr) return std::nullopt;
  return node->lastFailure;
}

std::string failureReason(const WorkerFailure& failure) {
  std::string reason = statusText(failure);
  if (failure.hang != HangKind::kNone) {
    reason += failure.hangDetail.empty() ? ": hung" : ": hung, " + failure.hangDetail;
  }
  if (!failure.oom.empty()) reason += ": killed by the kernel's OOM killer (" + failure.oom + ")";
  if (!failure.message.empty()) reason += ": " + failure.message;
  return printable(reason);
}

std::vector<Incident> jobIncidents(const JobStatus& status) {
  std::vector<Incident> merged;
  for (const AgentSnapshot& node : status.nodes) {
    for (const Incident& incident : node.incidents) {
      const auto same = std::find_if(merged.begin(), merged.end(), [&](const Incident& known) {
        return known.sameFailure(incident);
      });
      if (same == merged.end()) {
        merged.push_back(incident);
        continue;
      }
      same->failedAt = std::min(same->failedAt, incident.failedAt);
      same->detectedAt = std::min(same->detectedAt, incident.detectedAt);
      // The earliest decision, with what it decided.
      if (incident.decidedAt && (!same->decidedAt || *incident.decidedAt < *same->decidedAt)) {
        same->decidedAt = incident.decidedAt;
        same->outcome = incident.outcome;
        same->failureClass = incident.failureClass;
      }
      if (incident.runningAt && (!same->runningAt || *incident.runningAt > *same->runningAt)) {
        same->runningAt = incident.runningAt;
      }
      if (incident.progressAt && (!same->progressAt || *incident.progressAt < *same->progressAt)) {
        same->progressAt = incident.progressAt;
      }
      same->closed = same->closed && incident.closed;
      if (same->host.empty()) same->host = incident.host;
    }
  }
  std::sort(merged.begin(), merged.end(),
            [](const Incident& a, const Incident& b) { return a.failedAt < b.failedAt; });
  if (merged.size() > kShownIncidents) {
    merged.erase(merged.begin(), merged.end() - static_cast<std::ptrdiff_t>(kShownIncidents));
  }
  return merged;
}

std::string renderText(const JobStatus& status, double now) {
  const std::string run = printable(status.runId);
  std::string text;
  if (ended(status)) {
    const int code = outcomeCode(status);
    // "failed" when the code is the last worker failure's (the root cause's, which every agent
    // exits with): 128 + signal is also the code of agents stopped by a signal (Ctrl-C, a
    // scheduler's SIGTERM), which is no failure of the job's.
    const auto failure = lastFailure(status);
    const char* outcome = code == 0                                 ? "succeeded"
                          : failure && exitCodeOf(*failure) == code ? "failed"
                                                                    : "stopped";
    text += fmt::format("job '{}' has ended: {} (exit code {}), round {}, restarts {} of {}\n", run,
                        outcome, code, round(status), restarts(status), maxRestarts(status));
  } else if (!status.nodes.empty()) {
    // The job's nodes: a spare is none of them until it takes a place.
    const auto active = std::count_if(status.nodes.begin(), status.nodes.end(), activeNode);
    text += fmt::format("job '{}': round {}, restarts {} of {}, {} node{}\n", run, round(status),
                        restarts(status), maxRestarts(status), active, active == 1 ? "" : "s");
    if (const auto spares = sparesLine(sparePool(status, now))) text += *spares + "\n";
  } else if (status.records) {
    text += recordsLine(run, *status.records) + "\n";
  } else {
    text += fmt::format("job '{}': no status this ddprun can show, no round records\n", run);
  }
  for (const AgentSnapshot& node : status.nodes) {
    text += nodeLine(node, now) + "\n";
    if (node.restartAt) {
      text += fmt::format("  restart {} in {:.0f} s (back-off)\n", node.restarts + 1,
                          std::max(0.0, *node.restartAt - now));
    }
    if (node.leftOut) text += fmt::format("  left out of the job: {}\n", printable(*node.leftOut));
    if (node.exclusions > 0) {
      text += fmt::format(
          "  health gate: excluded {} time{}, last: {}{}\n", node.exclusions,
          node.exclusions == 1 ? "" : "s", printable(node.lastExclusion.value_or("?")),
          node.healthRetryAt
              ? fmt::format("; checks again in {:.0f} s", std::max(0.0, *node.healthRetryAt - now))
              : std::string());
    }
    for (const WorkerSnapshot& worker : node.workers) text += workerLine(worker, now) + "\n";
  }
  if (const AgentSnapshot* failed = lastFailedNode(status)) {
    // The class the node that holds this failure gave it, not another node's later one (a
    // health gate's exclusion, say).
    const WorkerFailure& failure = *failed->lastFailure;
    const auto kind = failed->lastFailureClass;
    text += fmt::format("last failure: rank {} (local {}) on {}: {}{}\n", failure.rank,
                        failure.localRank, printable(failure.host), failureReason(failure),
                        kind ? fmt::format(" ({} failure)", failureClassName(*kind)) : "");
  }
  const std::vector<Incident> incidents = jobIncidents(status);
  if (!incidents.empty()) {
    text +=
        fmt::format("incidents ({}, oldest first; times from each failure):\n", incidents.size());
    for (const Incident& incident : incidents) text += "  " + incidentText(incident) + "\n";
  }
  for (const UnreadableKey& key : status.unreadable) text += unreadableLine(key) + "\n";
  return text;
}

nlohmann::json renderJson(const JobStatus& status, double now) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const AgentSnapshot& node : status.nodes) {
    nlohmann::json value = toJson(node);
    value["stale"] = stale(node, now);
    nodes.push_back(std::move(value));
  }
  nlohmann::json unreadable = nlohmann::json::array();
  for (const UnreadableKey& key : status.unreadable) {
    const bool tooLarge = key.why == UnreadableKey::Why::kTooLarge;
    nlohmann::json entry{{"key", common::validUtf8(key.key)},
                         {"reason", tooLarge ? "too_large" : "not_a_snapshot"}};
    if (tooLarge) entry["bytes"] = key.bytes;
    unreadable.push_back(std::move(entry));
  }
  nlohmann::json value{{"run_id", status.runId},
                       {"state", ended(status) ? "ended" : "running"},
                       {"round", round(status)},
                       {"restarts", restarts(status)},
                       {"max_restarts", maxRestarts(status)},
                       {"nodes", std::move(nodes)},
                       {"incidents", nlohmann::json::array()},
                       {"last_failure", nullptr},
                       {"unreadable", std::move(unreadable)}};
  for (const Incident& incident : jobIncidents(status))
    value["incidents"].push_back(toJson(incident));
  if (status.nodes.empty() && status.records) {
    // No snapshot yet: what the round records say, and no maximum (only the agents know it).
    const RoundRecords& records = *status.records;
    value["state"] = recordsState(records);
    value["round"] = records.round.value_or(-1);
    value["restarts"] = records.restarts;
    value["max_restarts"] = nullptr;
    value["joined"] = records.round ? records.joined : records.registered;
  }
  const SparePool pool = sparePool(status, now);
  nlohmann::json hosts = nlohmann::json::array();
  for (const std::string& host : pool.waiting) hosts.push_back(common::validUtf8(host));
  value["spares"] = nlohmann::json{
      {"wanted", pool.wanted}, {"waiting", pool.waiting.size()}, {"hosts", std::move(hosts)}};
  if (ended(status)) value["exit_code"] = outcomeCode(status);
  if (const auto failure = lastFailure(status)) {
    value["last_failure"] = toJson(*failure);
    value["last_failure"]["reason"] = failureReason(*failure);
  }
  return value;
}

std::string renderJsonText(const JobStatus& status, double now) {
  return common::printableJson(
      renderJson(status, now).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace ddprun::launcher
