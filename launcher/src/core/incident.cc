#include "core/incident.h"

#include <fmt/format.h>

#include <stdexcept>

#include "core/json_fields.h"
#include "ddprun/common/text.h"

namespace ddprun::launcher {
namespace {

using nlohmann::json;

constexpr std::string_view kRecord = "an incident";

constexpr IncidentKind kKinds[] = {IncidentKind::kWorkerFailed, IncidentKind::kHang,
                                   IncidentKind::kNodeLost,     IncidentKind::kNodeLeft,
                                   IncidentKind::kFenced,       IncidentKind::kStoreLost};
constexpr IncidentOutcome kOutcomes[] = {IncidentOutcome::kPending, IncidentOutcome::kRestarted,
                                         IncidentOutcome::kReformed, IncidentOutcome::kJobFailed};

}  // namespace

const char* incidentKindName(IncidentKind kind) {
  switch (kind) {
    case IncidentKind::kWorkerFailed:
      return "worker_failed";
    case IncidentKind::kHang:
      return "hang";
    case IncidentKind::kNodeLost:
      return "node_lost";
    case IncidentKind::kNodeLeft:
      return "node_left";
    case IncidentKind::kFenced:
      return "fenced";
    case IncidentKind::kStoreLost:
      return "store_lost";
  }
  return "worker_failed";
}

std::optional<IncidentKind> incidentKindFromName(std::string_view name) {
  for (const IncidentKind kind : kKinds) {
    if (name == incidentKindName(kind)) return kind;
  }
  return std::nullopt;
}

const char* incidentOutcomeName(IncidentOutcome outcome) {
  switch (outcome) {
    case IncidentOutcome::kPending:
      return "pending";
    case IncidentOutcome::kRestarted:
      return "restarted";
    case IncidentOutcome::kReformed:
      return "reformed";
    case IncidentOutcome::kJobFailed:
      return "job_failed";
  }
  return "pending";
}

std::optional<IncidentOutcome> incidentOutcomeFromName(std::string_view name) {
  for (const IncidentOutcome outcome : kOutcomes) {
    if (name == incidentOutcomeName(outcome)) return outcome;
  }
  return std::nullopt;
}

std::optional<double> Incident::lostSeconds() const {
  if (progressAt) return *progressAt - failedAt;
  if (runningAt) return *runningAt - failedAt;
  return std::nullopt;
}

bool Incident::sameFailure(const Incident& other) const {
  return round == other.round && kind == other.kind && rank == other.rank &&
         (rank.has_value() || groupRank == other.groupRank);
}

std::string incidentText(const Incident& incident) {
  const auto after = [&](const std::optional<double>& at) {
    return at ? fmt::format("+{:.2f} s", *at - incident.failedAt) : std::string("-");
  };
  const std::string host = common::printable(incident.host);
  const std::string who = incident.rank ? fmt::format("rank {} on {}", *incident.rank, host)
                          : incident.groupRank >= 0 || !incident.host.empty()
                              ? fmt::format("node {} ({})", incident.groupRank, host)
                              : std::string("this node");
  const auto lost = incident.lostSeconds();
  return fmt::format(
      "round {}, {}, {} ({}; {}, {}): detected {}, decided {}, running {}, progress {}; {}",
      incident.round, incidentKindName(incident.kind), who, common::printable(incident.detail),
      incident.failureClass ? failureClassName(*incident.failureClass) : "no class",
      incidentOutcomeName(incident.outcome), after(incident.detectedAt), after(incident.decidedAt),
      after(incident.runningAt), after(incident.progressAt),
      lost ? fmt::format("{:.2f} s lost", *lost)
           : std::string(incident.closed ? "nothing resumed" : "open"));
}

json toJson(const Incident& incident) {
  json value{{"round", incident.round},
             {"kind", incidentKindName(incident.kind)},
             {"group_rank", incident.groupRank},
             {"host", common::validUtf8(incident.host)},
             {"detail", common::validUtf8(incident.detail)},
             {"outcome", incidentOutcomeName(incident.outcome)},
             {"failed_at", incident.failedAt},
             {"detected_at", incident.detectedAt},
             {"closed", incident.closed}};
  if (incident.rank) value["rank"] = *incident.rank;
  if (incident.failureClass) value["failure_class"] = failureClassName(*incident.failureClass);
  if (incident.decidedAt) value["decided_at"] = *incident.decidedAt;
  if (incident.runningAt) value["running_at"] = *incident.runningAt;
  if (incident.progressAt) value["progress_at"] = *incident.progressAt;
  if (const auto lost = incident.lostSeconds()) value["lost_s"] = *lost;
  return value;
}

Incident incidentFromJson(const json& value) {
  if (!value.is_object()) throw std::invalid_argument("an incident must be a JSON object");
  Incident incident;
  incident.round = jsonField<int>(value, "round", kRecord);
  const auto kind = incidentKindFromName(jsonField<std::string>(value, "kind", kRecord));
  if (!kind) throw std::invalid_argument("an incident has an unknown kind");
  incident.kind = *kind;
  incident.rank = optionalJsonField<int>(value, "rank", kRecord);
  incident.groupRank = jsonField<int>(value, "group_rank", kRecord);
  incident.host = jsonField<std::string>(value, "host", kRecord);
  incident.detail = jsonField<std::string>(value, "detail", kRecord);
  if (const auto name = optionalJsonField<std::string>(value, "failure_class", kRecord)) {
    incident.failureClass = failureClassFromName(*name);
    if (!incident.failureClass) throw std::invalid_argument("an incident has an unknown class");
  }
  const auto outcome = incidentOutcomeFromName(jsonField<std::string>(value, "outcome", kRecord));
  if (!outcome) throw std::invalid_argument("an incident has an unknown outcome");
  incident.outcome = *outcome;
  incident.failedAt = jsonField<double>(value, "failed_at", kRecord);
  incident.detectedAt = jsonField<double>(value, "detected_at", kRecord);
  incident.decidedAt = optionalJsonField<double>(value, "decided_at", kRecord);
  incident.runningAt = optionalJsonField<double>(value, "running_at", kRecord);
  incident.progressAt = optionalJsonField<double>(value, "progress_at", kRecord);
  incident.closed = jsonField<bool>(value, "closed", kRecord);
  return incident;
}

}  // namespace ddprun::launcher
