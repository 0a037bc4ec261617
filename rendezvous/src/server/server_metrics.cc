#include "ddprun/rendezvous/server_metrics.h"

#include <cstdint>
#include <functional>

namespace ddprun::rendezvous {
namespace {

using common::MetricType;

void family(common::MetricsText& text, const std::vector<LabelledStats>& stores,
            std::string_view name, MetricType type, std::string_view help,
            const std::function<double(const RendezvousServer::Stats&)>& value) {
  text.family(name, type, help);
  for (const LabelledStats& store : stores) text.sample(value(store.stats), store.labels);
}

}  // namespace

void storeMetrics(common::MetricsText& text, const std::vector<LabelledStats>& stores) {
  using Stats = RendezvousServer::Stats;
  const auto count = [](auto Stats::*field) {
    return [field](const Stats& stats) { return static_cast<double>(stats.*field); };
  };
  family(text, stores, "ddprun_store_connections", MetricType::kGauge, "Store connections open now",
         count(&Stats::connections));
  family(text, stores, "ddprun_store_connections_accepted_total", MetricType::kCounter,
         "Store connections accepted", count(&Stats::accepted));
  family(text, stores, "ddprun_store_connections_refused_total", MetricType::kCounter,
         "Store connections closed at once: over the server's connection limit",
         count(&Stats::refused));
  family(text, stores, "ddprun_store_protocol_errors_total", MetricType::kCounter,
         "Store connections closed for a bad frame or a stalled request",
         count(&Stats::protocolErrors));
  family(text, stores, "ddprun_store_refused_handshakes_total", MetricType::kCounter,
         "Store connections closed for failing the job token's handshake",
         count(&Stats::refusedHandshakes));
  family(text, stores, "ddprun_store_keys", MetricType::kGauge, "Keys the store holds now",
         count(&Stats::keys));
  family(text, stores, "ddprun_store_stored_bytes", MetricType::kGauge,
         "Bytes the store's data holds, as its stored-bytes limit counts them",
         count(&Stats::storedBytes));
  family(text, stores, "ddprun_store_pending_reply_bytes", MetricType::kGauge,
         "Bytes unsent replies hold beyond the stored data", count(&Stats::pendingReplyBytes));
  text.family("ddprun_store_operations_total", MetricType::kCounter,
              "Store requests served, by operation (the TCPStore protocol's names)");
  for (const LabelledStats& store : stores) {
    for (const auto& [op, served] : store.stats.operations) {
      std::vector<common::MetricLabel> labels = store.labels;
      labels.emplace_back("op", op);
      text.sample(static_cast<double>(served), labels);
    }
  }
}

}  // namespace ddprun::rendezvous
