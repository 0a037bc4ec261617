// Loopback ports for tests: one to tell processes before anyone listens on it, or a listener of
// the test's own (a peer that is not a store, or one that never answers).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace ddprun::test {

// A listening TCP socket on 127.0.0.1 at a port the kernel chose; the port goes to `port`.
inline int listenOnLoopback(std::uint16_t& port, int backlog = 16) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  ::listen(fd, backlog);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  port = ntohs(address.sin_port);
  return fd;
}

// A port on 127.0.0.1 that was free a moment ago (the kernel's choice for port 0).
inline std::uint16_t freePort() {
  std::uint16_t port = 0;
  ::close(listenOnLoopback(port));
  return port;
}

}  // namespace ddprun::test
