#include "ddprun/rendezvous/server_limits.h"

#include <fmt/format.h>

#include <climits>
#include <cstdint>
#include <limits>

namespace ddprun::rendezvous {
namespace {

long long signedCount(std::size_t count) {
  return count > static_cast<std::size_t>(LLONG_MAX) ? LLONG_MAX : static_cast<long long>(count);
}

double seconds(std::chrono::milliseconds duration) {
  return static_cast<double>(duration.count()) / 1000;
}

// Whole milliseconds, saturating: a number of seconds too large for the clock is "forever".
std::chrono::milliseconds milliseconds(double seconds) {
  const double ms = seconds * 1000;
  constexpr auto kMost = std::numeric_limits<std::chrono::milliseconds::rep>::max();
  if (!(ms < static_cast<double>(kMost))) return std::chrono::milliseconds(kMost);
  return std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(ms));
}

}  // namespace

ServerLimits ServerLimits::of(const ServerOptions& o) {
  ServerLimits limits;
  limits.maxConnections = signedCount(o.maxConnections);
  limits.maxKeyBytes = signedCount(o.limits.maxKeyBytes);
  limits.maxValueBytes = signedCount(o.limits.maxValueBytes);
  limits.maxKeysPerRequest = signedCount(o.limits.maxKeysPerRequest);
  limits.maxRequestBytes = signedCount(o.limits.maxRequestBytes);
  limits.maxPendingHandshakes = signedCount(o.maxPendingHandshakes);
  limits.maxStoredBytes = signedCount(o.maxStoredBytes);
  limits.maxTotalPendingReplyBytes = signedCount(o.maxTotalPendingReplyBytes);
  limits.partialRequestTimeoutSeconds = seconds(o.partialRequestTimeout);
  limits.writeStallTimeoutSeconds = seconds(o.writeStallTimeout);
  limits.handshakeTimeoutSeconds = seconds(o.handshakeTimeout);
  limits.keepAliveIdleSeconds = o.keepAliveIdle.count();
  limits.keepAliveIntervalSeconds = o.keepAliveInterval.count();
  limits.keepAliveProbes = o.keepAliveProbes;
  return limits;
}

void ServerLimits::applyTo(ServerOptions& o) const {
  o.maxConnections = static_cast<std::size_t>(maxConnections);
  o.limits.maxKeyBytes = static_cast<std::size_t>(maxKeyBytes);
  o.limits.maxValueBytes = static_cast<std::size_t>(maxValueBytes);
  o.limits.maxKeysPerRequest = static_cast<std::size_t>(maxKeysPerRequest);
  o.limits.maxRequestBytes = static_cast<std::size_t>(maxRequestBytes);
  o.maxPendingHandshakes = static_cast<std::size_t>(maxPendingHandshakes);
  o.maxStoredBytes = static_cast<std::size_t>(maxStoredBytes);
  o.maxTotalPendingReplyBytes = static_cast<std::size_t>(maxTotalPendingReplyBytes);
  o.partialRequestTimeout = milliseconds(partialRequestTimeoutSeconds);
  o.writeStallTimeout = milliseconds(writeStallTimeoutSeconds);
  o.handshakeTimeout = milliseconds(handshakeTimeoutSeconds);
  o.keepAliveIdle = std::chrono::seconds(keepAliveIdleSeconds);
  o.keepAliveInterval = std::chrono::seconds(keepAliveIntervalSeconds);
  o.keepAliveProbes = static_cast<int>(keepAliveProbes);
}

std::optional<std::string> serverLimitsProblem(const ServerLimits& l) {
  const std::pair<long long, const char*> counts[] = {
      {l.maxConnections, "max-connections"},    {l.maxKeyBytes, "max-key-bytes"},
      {l.maxValueBytes, "max-value-bytes"},     {l.maxKeysPerRequest, "max-keys-per-request"},
      {l.maxRequestBytes, "max-request-bytes"}, {l.maxPendingHandshakes, "max-pending-handshakes"},
  };
  for (const auto& [given, option] : counts) {
    if (given < 1) return fmt::format("--{} {} must be at least 1", option, given);
  }
  // Either budget below one value would refuse (or hold back) the values the limits allow.
  const std::pair<long long, const char*> budgets[] = {
      {l.maxStoredBytes, "max-stored-bytes"},
      {l.maxTotalPendingReplyBytes, "max-pending-reply-bytes"},
  };
  for (const auto& [given, option] : budgets) {
    if (given < l.maxValueBytes) {
      return fmt::format("--{} {} is less than --max-value-bytes {}: give at least {}", option,
                         given, l.maxValueBytes, l.maxValueBytes);
    }
  }
  // A timeout under the server's resolution (1 ms) would be 0: every connection closed at once.
  const std::pair<double, const char*> timeouts[] = {
      {l.partialRequestTimeoutSeconds, "partial-request-timeout"},
      {l.writeStallTimeoutSeconds, "write-stall-timeout"},
      {l.handshakeTimeoutSeconds, "handshake-timeout"},
  };
  for (const auto& [given, option] : timeouts) {
    if (!(given >= 0.001)) {
      return fmt::format("--{} must be a positive number of seconds (at least 0.001)", option);
    }
  }
  // The kernel takes each as an int.
  const auto inInt = [](long long value, long long least) {
    return value >= least && value <= INT_MAX;
  };
  if (!inInt(l.keepAliveIdleSeconds, 0) || !inInt(l.keepAliveIntervalSeconds, 1) ||
      !inInt(l.keepAliveProbes, 1)) {
    return fmt::format(
        "--keepalive-idle must be >= 0, --keepalive-interval and --keepalive-probes "
        ">= 1 (and each at most {})",
        INT_MAX);
  }
  return std::nullopt;
}

}  // namespace ddprun::rendezvous
