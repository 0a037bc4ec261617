// The range check of a server's limits (ServerOptions), one copy for every program that builds
// a server: ddprun-rendezvous from its options, the agent from its descriptor budget.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "ddprun/rendezvous/server.h"

namespace ddprun::rendezvous {

// ServerOptions' limits, each in a type that holds whatever a person may give: counts signed, so
// that -1 is refused rather than read as 2^64 - 1 and let through; timeouts in seconds as real
// numbers, as ddprun-rendezvous takes them.
struct ServerLimits {
  long long maxConnections = 0;
  long long maxKeyBytes = 0;
  long long maxValueBytes = 0;
  long long maxKeysPerRequest = 0;
  long long maxRequestBytes = 0;
  long long maxPendingHandshakes = 0;
  long long maxStoredBytes = 0;
  long long maxTotalPendingReplyBytes = 0;
  double partialRequestTimeoutSeconds = 0;
  double writeStallTimeoutSeconds = 0;
  double handshakeTimeoutSeconds = 0;
  long long keepAliveIdleSeconds = 0;
  long long keepAliveIntervalSeconds = 0;
  long long keepAliveProbes = 0;

  // The limits of `options` (a count beyond the signed range reads as the largest one).
  static ServerLimits of(const ServerOptions& options);
  // Writes the limits into `options`; only after serverLimitsProblem() found none.
  void applyTo(ServerOptions& options) const;
};

// The first limit out of range, as one line naming it as ddprun-rendezvous's option (the one place
// a person gives these; elsewhere a problem is a bug) and what to give instead, or nothing: every
// count at least 1; the stored data and the pending replies of all connections at least one value
// (a smaller budget would refuse or hold back the values the limits allow); every timeout a
// positive number of seconds, at least a millisecond (the server's resolution); keep-alive idle at
// least 0 (0: off), its interval and probes at least 1.
std::optional<std::string> serverLimitsProblem(const ServerLimits& limits);
inline std::optional<std::string> serverLimitsProblem(const ServerOptions& options) {
  return serverLimitsProblem(ServerLimits::of(options));
}

}  // namespace ddprun::rendezvous
