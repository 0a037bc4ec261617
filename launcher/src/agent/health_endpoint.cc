#include "agent/health_endpoint.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/ip/address.hpp>

#include "agent/startup_error.h"
#include "core/agent_snapshot.h"
#include "ddprun/common/port.h"
#include "ddprun/common/text.h"
#include "ddprun/common/worker_env_names.h"
#include "machine/agent_machine.h"
#include "report/metrics_page.h"
#include "stores/hosted_stores.h"

namespace ddprun::launcher {

std::optional<HealthEndpoint> healthEndpointOf(
    const std::map<std::string, std::string>& environment) {
  const auto port = environment.find(common::kEnvTorchelasticHealthCheckPort);
  // Empty is unset: operators' templates often export a variable they leave blank.
  if (port == environment.end() || port->second.empty()) return std::nullopt;
  HealthEndpoint endpoint;
  const std::string& text = port->second;
  const auto value = common::parsePort(text);
  if (!value) {
    throw StartupError(
        fmt::format("{}='{}' is not a port number; give 1..65535 (0: a free port), or unset it",
                    common::kEnvTorchelasticHealthCheckPort, common::printable(text)));
  }
  endpoint.port = *value;
  if (const auto host = environment.find(common::kEnvDdprunHealthCheckAddr);
      host != environment.end() && !host->second.empty()) {
    boost::system::error_code notAnAddress;
    boost::asio::ip::make_address(host->second, notAnAddress);
    if (notAnAddress) {
      throw StartupError(
          fmt::format("{}='{}' is not an IP address; give one such as 127.0.0.1 or 0.0.0.0",
                      common::kEnvDdprunHealthCheckAddr, common::printable(host->second)));
    }
    endpoint.host = host->second;
  }
  if (const auto names = environment.find(common::kEnvDdprunHealthCheckHosts);
      names != environment.end()) {
    try {
      endpoint.hostNames = rendezvous::parseHealthHostNames(names->second);
    } catch (const rendezvous::HealthServerError& notNames) {
      throw StartupError(fmt::format("{}: {}; give host names separated by commas",
                                     common::kEnvDdprunHealthCheckHosts, notNames.what()));
    }
  }
  return endpoint;
}

std::unique_ptr<rendezvous::HealthServer> serveHealth(boost::asio::io_context& io,
                                                      const std::optional<HealthEndpoint>& endpoint,
                                                      const AgentMachine& machine,
                                                      const std::string& role,
                                                      const HostedStores& stores) {
  if (!endpoint) return nullptr;
  rendezvous::HealthServerOptions options;
  options.host = endpoint->host;
  options.port = endpoint->port;
  options.hostNames = endpoint->hostNames;
  try {
    auto server = std::make_unique<rendezvous::HealthServer>(
        io, options,
        [&machine] {
          const AgentSnapshot snapshot = machine.snapshot();
          // The run id is its one text, checked at start; replace, never throw, should some slip.
          return rendezvous::HealthReport{
              healthy(snapshot), toHealthJson(snapshot).dump(
                                     -1, ' ', false, nlohmann::json::error_handler_t::replace)};
        },
        [&machine, &stores, role] {
          const AgentSnapshot snapshot = machine.snapshot();
          return metricsPage(snapshot, machine.metrics(), role, snapshot.updatedAt, stores.stats());
        });
    spdlog::info("serving /healthz on http://{0}/healthz and /metrics on http://{0}/metrics",
                 server->address());
    return server;
  } catch (const rendezvous::HealthServerError& error) {
    if (error.code() == rendezvous::HealthServerError::Code::kAddress) {
      throw StartupError(fmt::format("{}: {}; give an IP address such as 127.0.0.1 or 0.0.0.0",
                                     common::kEnvDdprunHealthCheckAddr,
                                     common::printable(error.what())));
    }
    throw StartupError(fmt::format("{}={}: {}; choose a free port, or unset it",
                                   common::kEnvTorchelasticHealthCheckPort, endpoint->port,
                                   common::printable(error.what())));
  }
}

}  // namespace ddprun::launcher
