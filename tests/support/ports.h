// Loopback ports for tests: one to tell processes before anyone listens on it, or a listener of
// the test's own (a peer that is not a store, or one that never answers).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>

namespace ddprun::test {

// Whether `port` is now this test's: no other test claimed it in the last 600 s. The claims are
// tests/support/ports.py's (one empty file per port under /tmp/ddprun-test-ports): two tests
// beside each other once drew the same port. Where the directory cannot be used, every port
// counts as claimed, as before.
inline bool claimPort(std::uint16_t port) {
  constexpr const char* kClaims = "/tmp/ddprun-test-ports";
  constexpr std::time_t kClaimSeconds = 600;
  if (::mkdir(kClaims, 0700) != 0) {
    struct stat directory {};
    if (errno != EEXIST || ::lstat(kClaims, &directory) != 0 || !S_ISDIR(directory.st_mode) ||
        directory.st_uid != ::geteuid()) {
      return true;  // not ours to write into
    }
  }
  const std::string path = std::string(kClaims) + "/" + std::to_string(port);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::close(fd);
      return true;
    }
    if (errno != EEXIST) return true;
    struct stat info {};
    if (::lstat(path.c_str(), &info) != 0) continue;  // gone meanwhile: try again
    if (std::time(nullptr) - info.st_mtime < kClaimSeconds) return false;
    ::unlink(path.c_str());  // a lapsed claim
  }
  return false;
}

// 127.0.0.1:`port` (0: any port) as a socket address.
inline sockaddr_in loopbackAddress(std::uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

// A listening TCP socket on 127.0.0.1 at a port the kernel chose; the port goes to `port`.
inline int listenOnLoopback(std::uint16_t& port, int backlog = 16) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address = loopbackAddress(0);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  ::listen(fd, backlog);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  port = ntohs(address.sin_port);
  return fd;
}

// A port on 127.0.0.1 that is free now, outside the kernel's ephemeral range (the rule and its
// reason are tests/support/ports.py's: a port from bind(0) can be taken by any outgoing connection
// of a test running beside this one before the process told about it listens).
inline std::uint16_t freePort() {
  unsigned low = 32768, high = 60999;
  if (FILE* range = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(range, "%u %u", &low, &high) != 2) low = 32768, high = 60999;
    std::fclose(range);
  }
  const unsigned first = low > 21000 ? 20000 : high + 1;
  const unsigned last = low > 21000 ? low - 1 : 65000;
  std::random_device seed;
  std::mt19937 pick(seed());
  for (int attempt = 0; attempt < 500; ++attempt) {
    const auto port =
        static_cast<std::uint16_t>(std::uniform_int_distribution<unsigned>(first, last)(pick));
    if (port == 29400) continue;  // torch 1.13 --standalone's fixed port
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    const sockaddr_in address = loopbackAddress(port);
    const bool free = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
    ::close(fd);
    if (free && claimPort(port)) return port;
  }
  std::uint16_t port = 0;  // every pick taken: the kernel's choice, as before
  ::close(listenOnLoopback(port));
  return port;
}

}  // namespace ddprun::test
