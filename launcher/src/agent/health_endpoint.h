// The agent's /healthz and /metrics: with TORCHELASTIC_HEALTH_CHECK_PORT set (torch's name), the
// agent serves GET /healthz (and GET /metrics, report/metrics_page.h) on its event loop, answering
// from its AgentSnapshot: the body is toHealthJson(snapshot), the snapshot's states, counts and
// times without its text (no failure message, no path, no host name: whoever reaches the port may
// read it), and the code is healthy(snapshot) (200, or 503 when a worker is hung or the agent is
// stopping or finished): the one rule shared with `ddprun status`, which shows the whole snapshot.
//
// Thread safety: the server runs on the agent's io_context; the snapshot is taken on that thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/rendezvous/health_server.h"

namespace ddprun::launcher {

class AgentMachine;
class HostedStores;

struct HealthEndpoint {
  std::uint16_t port = 0;              // 0: a free port, named in the agent's log
  std::string host = "127.0.0.1";      // DDPRUN_HEALTH_CHECK_ADDR widens it
  std::vector<std::string> hostNames;  // DDPRUN_HEALTH_CHECK_HOSTS: Host names taken besides
};

// What the environment asks for: nothing when TORCHELASTIC_HEALTH_CHECK_PORT is unset or empty.
// Throws StartupError naming the variable when its value is no port number (0..65535), when
// DDPRUN_HEALTH_CHECK_ADDR is no IP address, or when DDPRUN_HEALTH_CHECK_HOSTS holds what is no
// host name: before anything starts.
std::optional<HealthEndpoint> healthEndpointOf(
    const std::map<std::string, std::string>& environment);

// Listens now (throws StartupError naming the port and the variable when it cannot) and answers
// /healthz and /metrics (report/metrics_page.h; `role`: the workers' role; `stores`: those this
// agent hosts) from `machine` as `io` runs; nothing when `endpoint` is empty. Destroy it before
// `machine` and `stores`.
std::unique_ptr<rendezvous::HealthServer> serveHealth(boost::asio::io_context& io,
                                                      const std::optional<HealthEndpoint>& endpoint,
                                                      const AgentMachine& machine,
                                                      const std::string& role,
                                                      const HostedStores& stores);

}  // namespace ddprun::launcher
