// JobMetrics: what an agent counts over the whole job, for /metrics (report/metrics_page.h):
// rounds and how long each took to form, restarts by failure class, incidents by kind and class,
// and each incident's durations from the failure (core/incident.h). The machine and its incident
// timeline add to it on the loop; the page reads it there.
//
// Thread safety: a plain value.
#pragma once

#include <map>
#include <optional>
#include <utility>

#include "core/failure_class.h"
#include "core/incident.h"
#include "ddprun/common/metrics_text.h"

namespace ddprun::launcher {

struct JobMetrics {
  int roundsFormed = 0;
  // From this agent's join to the round's forming (the health gate's time not counted).
  common::Histogram roundFormation{common::durationBuckets()};
  std::map<FailureClass, int> restarts;  // restarts decided here, by the failure's class
  // Closed incidents by kind and class (none: closed by the agent's own end before a decision).
  std::map<std::pair<IncidentKind, std::optional<FailureClass>>, int> incidents;
  // Seconds from an incident's failure to: its detection, this node's new group running, the
  // first progress report after it; and what it cost in all (Incident::lostSeconds).
  common::Histogram detection{common::durationBuckets()};
  common::Histogram recovery{common::durationBuckets()};
  common::Histogram progress{common::durationBuckets()};
  common::Histogram lost{common::durationBuckets()};
};

}  // namespace ddprun::launcher
