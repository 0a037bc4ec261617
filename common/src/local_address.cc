#include "ddprun/common/local_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ddprun::common {
namespace {

// The discard service: any non-zero port will do, since only the route is asked for.
constexpr std::uint16_t kAnyPort = 9;

// The source address the kernel picks for `peer`, or nothing.
std::optional<std::string> sourceAddressFor(const addrinfo& peer) {
  const int fd = ::socket(peer.ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> address;
  // connect() on a datagram socket sends nothing: it only chooses the route and source address.
  sockaddr_storage local{};
  socklen_t length = sizeof local;
  if (::connect(fd, peer.ai_addr, peer.ai_addrlen) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw =
        local.ss_family == AF_INET6
            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&local)->sin6_addr)
            : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&local)->sin_addr);
    if (::inet_ntop(local.ss_family, raw, text, sizeof text) != nullptr) address = text;
  }
  ::close(fd);
  return address;
}

}  // namespace

std::optional<std::string> localAddressToward(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port == 0 ? kAnyPort : port).c_str(), &hints,
                    &found) != 0) {
    return std::nullopt;
  }
  // Every resolved address in order: a name may resolve to an IPv6 address first that has no
  // route here while its IPv4 address has one.
  std::optional<std::string> address;
  for (const addrinfo* candidate = found; candidate != nullptr && !address;
       candidate = candidate->ai_next) {
    address = sourceAddressFor(*candidate);
  }
  ::freeaddrinfo(found);
  return address;
}

bool isLoopbackAddress(const std::string& host) {
  if (host == "localhost") return true;
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  if (::inet_pton(AF_INET, host.c_str(), &v4.sin_addr) == 1) {
    return isLoopbackAddress(reinterpret_cast<const sockaddr&>(v4));
  }
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  if (::inet_pton(AF_INET6, host.c_str(), &v6.sin6_addr) == 1) {
    return isLoopbackAddress(reinterpret_cast<const sockaddr&>(v6));
  }
  return false;
}

bool isLoopbackAddress(const sockaddr& address) {
  if (address.sa_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    return (ntohl(v4.sin_addr.s_addr) >> 24) == 127;
  }
  if (address.sa_family == AF_INET6) {
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6&>(address).sin6_addr);
  }
  return false;
}

}  // namespace ddprun::common
