// The agent's /metrics page: its snapshot (core/agent_snapshot.h) and what it counted over the
// job (core/job_metrics.h) in Prometheus' text format. torchelastic's metric names where it has
// them (agent/server/api.py's _record_metrics: workers.<role>.run_total, run_success_with_retries,
// run_success_no_retries, run_failed_with_retries, run_failed_no_retries, flakiness, as
// torchelastic_workers_<name>{role}), ddprun_* for the rest. docs/metrics.md lists each with its
// type and meaning.
//
// What /healthz may reveal, and no more: states, counts, times, ranks and the run id; no host
// name, address, path or message (docs/status.md). The role is the user's text: escaped as the
// format requires.
//
// Thread safety: a pure function.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/agent_snapshot.h"
#include "core/job_metrics.h"
#include "ddprun/rendezvous/server_metrics.h"

namespace ddprun::launcher {

// `now`: epoch seconds (heartbeat ages are taken from it). `stores`: the stores this agent hosts
// (their ddprun_store_* families, server_metrics.h), none when it hosts none.
std::string metricsPage(const AgentSnapshot& snapshot, const JobMetrics& metrics,
                        std::string_view role, double now,
                        const std::vector<rendezvous::LabelledStats>& stores = {});

}  // namespace ddprun::launcher
