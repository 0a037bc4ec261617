#include "daemon_health.h"

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "ddprun/common/metrics_text.h"
#include "ddprun/rendezvous/server_metrics.h"

namespace ddprun::rendezvous {

DaemonHealth::DaemonHealth(const HealthServerOptions& options, const RendezvousServer& server,
                           std::string version)
    : server_(server), version_(std::move(version)), storeAddress_(server.address()) {
  health_ = std::make_unique<HealthServer>(
      io_, options, [this] { return report(); }, [this] { return metrics(); });
  address_ = health_->address();
  thread_ = std::thread([this] { io_.run(); });
}

DaemonHealth::~DaemonHealth() {
  // The server is closed on the thread it runs on, then the thread ends with nothing left to do.
  boost::asio::post(io_, [this] { health_.reset(); });
  thread_.join();
}

HealthReport DaemonHealth::report() const {
  const bool serving = !draining_;
  const RendezvousServer::Stats stats = server_.stats();
  const double uptime =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const nlohmann::json body{{"service", "ddprun-rendezvous"},
                            {"version", version_},
                            {"state", serving ? "serving" : "draining"},
                            {"healthy", serving},
                            {"address", storeAddress_},
                            {"uptime_s", uptime},
                            {"connections", stats.connections},
                            {"accepted", stats.accepted},
                            {"refused", stats.refused},
                            {"protocol_errors", stats.protocolErrors},
                            {"refused_handshakes", stats.refusedHandshakes},
                            {"keys", stats.keys},
                            {"stored_bytes", stats.storedBytes},
                            {"pending_reply_bytes", stats.pendingReplyBytes}};
  return HealthReport{serving, body.dump()};
}

std::string DaemonHealth::metrics() const {
  using common::MetricType;
  const RendezvousServer::Stats stats = server_.stats();
  const double uptime =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  common::MetricsText text;
  text.family("ddprun_rendezvous_info", MetricType::kGauge,
              "Always 1; the daemon's version and its store's address as labels");
  text.sample(1, {{"version", version_}, {"address", storeAddress_}});
  text.single("ddprun_rendezvous_serving", MetricType::kGauge,
              "1 while the store serves, 0 once it drains to shut down", draining_ ? 0 : 1);
  text.single("ddprun_rendezvous_uptime_seconds", MetricType::kGauge,
              "Seconds since the daemon started", uptime);
  storeMetrics(text, {{{}, stats}});
  return text.take();
}

}  // namespace ddprun::rendezvous
