// The agent's /healthz (issue #21): with TORCHELASTIC_HEALTH_CHECK_PORT set (torch's name), the
// agent serves GET /healthz on its event loop, answering from its AgentSnapshot: the body is
// toJson(snapshot) and the code is healthy(snapshot) (200, or 503 when a worker is hung or the
// agent is stopping or finished): one form and one rule, shared with `ddprun status`.
//
// Thread safety: the server runs on the agent's io_context; the snapshot is taken on that thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>

#include "ddprun/rendezvous/health_server.h"

namespace ddprun::launcher {

class AgentMachine;

struct HealthEndpoint {
  std::uint16_t port = 0;          // 0: a free port, named in the agent's log
  std::string host = "127.0.0.1";  // DDPRUN_HEALTH_CHECK_ADDR widens it
};

// What the environment asks for: nothing when TORCHELASTIC_HEALTH_CHECK_PORT is unset or empty.
// Throws StartupError naming the variable when its value is no port number (0..65535), or when
// DDPRUN_HEALTH_CHECK_ADDR is no IP address: before anything starts.
std::optional<HealthEndpoint> healthEndpointOf(
    const std::map<std::string, std::string>& environment);

// Listens now (throws StartupError naming the port and the variable when it cannot) and answers
// from `machine` as `io` runs; nothing when `endpoint` is empty. Destroy it before `machine`.
std::unique_ptr<rendezvous::HealthServer> serveHealth(boost::asio::io_context& io,
                                                      const std::optional<HealthEndpoint>& endpoint,
                                                      const AgentMachine& machine);

}  // namespace ddprun::launcher
