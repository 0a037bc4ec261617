// A store server's figures (RendezvousServer::Stats) as Prometheus metrics: one copy of the
// families' names and meanings for ddprun-rendezvous' /metrics and for an agent that hosts the
// job's stores (docs/metrics.md). `labels` go on every sample: none for the daemon's one store, a
// `store` label for each store an agent hosts (all of one family's samples under one family).
//
// Thread safety: pure functions.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

#include "ddprun/common/metrics_text.h"
#include "ddprun/rendezvous/server.h"

namespace ddprun::rendezvous {

// One store's figures, with the labels that tell it from the page's other stores.
struct LabelledStats {
  std::vector<common::MetricLabel> labels;
  RendezvousServer::Stats stats;
};

// The ddprun_store_* families, each with one sample per store in `stores`.
void storeMetrics(common::MetricsText& text, const std::vector<LabelledStats>& stores);

}  // namespace ddprun::rendezvous
