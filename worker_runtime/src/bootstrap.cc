#include "bootstrap.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include "ddprun/rendezvous/errors.h"
#include "ddprun/rendezvous/prefix_store.h"
#include "ddprun/rendezvous/tcp_store.h"

namespace ddprun::detail {

Bootstrap Bootstrap::connect(const RuntimeOptions& options) {
  Bootstrap bootstrap;
  const std::string where = fmt::format("{}:{}", options.masterAddr, options.masterPort);
  if (options.hostStore && options.rank == 0) {
    rendezvous::ServerOptions serverOptions;
    serverOptions.host = options.masterAddr;
    serverOptions.port = static_cast<std::uint16_t>(options.masterPort);
    try {
      bootstrap.server = std::make_unique<rendezvous::RendezvousServer>(serverOptions);
    } catch (const rendezvous::ServerError& error) {
      throw RuntimeError(RuntimeError::Kind::kUnavailable,
                         fmt::format("rank 0 cannot host the store: {}", error.what()));
    }
    bootstrap.server->start();
  }

  rendezvous::TcpStoreOptions storeOptions;
  storeOptions.host = options.masterAddr;
  storeOptions.port = static_cast<std::uint16_t>(options.masterPort);
  storeOptions.timeout = options.timeout;
  storeOptions.connectTimeout = options.timeout;
  std::shared_ptr<rendezvous::Store> tcp;
  try {
    tcp = std::make_shared<rendezvous::TcpStore>(storeOptions);
  } catch (const rendezvous::StoreError& error) {
    throw RuntimeError(
        RuntimeError::Kind::kTimeout,
        fmt::format("rank {} cannot reach the store at {} ({}): start the program under ddprun, or "
                    "check MASTER_ADDR/MASTER_PORT and that rank 0 is running",
                    options.rank, where, error.what()));
  }
  bootstrap.keyPrefix = fmt::format("ddprun/runtime/{}/{}/{}", options.runId, options.generation,
                                    options.groupName);
  bootstrap.store = std::make_shared<rendezvous::PrefixStore>(std::move(tcp), bootstrap.keyPrefix);
  return bootstrap;
}

std::string localAddressToward(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) {
    return {};
  }
  std::string address;
  for (addrinfo* candidate = found; candidate != nullptr && address.empty();
       candidate = candidate->ai_next) {
    const int fd = ::socket(candidate->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    // connect() on a datagram socket only chooses the route and source address.
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    if (::connect(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw = local.ss_family == AF_INET6
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (inet_ntop(local.ss_family, raw, text, sizeof(text)) != nullptr) address = text;
    }
    ::close(fd);
  }
  freeaddrinfo(found);
  return address;
}

}  // namespace ddprun::detail
