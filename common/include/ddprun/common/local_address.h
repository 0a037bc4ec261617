// The address other hosts can reach this one at: the agent advertises it to the other nodes, and
// the runtime's Gloo backend listens on it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

struct sockaddr;

namespace ddprun::common {

// The local address the kernel would use as the source of packets to host:port ("10.0.0.5", or an
// IPv6 address in text form), found with a UDP connect and getsockname: no packet is sent and
// nothing needs to listen at host:port. Port 0 stands for any port (the route rarely depends on
// it). Nothing when `host` does not resolve or no route leads to it. Blocks in name resolution.
std::optional<std::string> localAddressToward(const std::string& host, std::uint16_t port);

// Whether a server bound to `host` can be reached from this host alone: "localhost" or a loopback
// literal (127.0.0.0/8, ::1). A name or a wildcard (0.0.0.0) counts as reachable from elsewhere.
bool isLoopbackAddress(const std::string& host);

// Whether a resolved address (AF_INET or AF_INET6) is a loopback address (127.0.0.0/8, ::1).
bool isLoopbackAddress(const sockaddr& address);

}  // namespace ddprun::common
