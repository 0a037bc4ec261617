// FakePeer: a listener on 127.0.0.1 that is no store. It answers every connection as a service of
// another kind would (an HTTP server, an SSH server, one that says nothing, one that hangs up),
// for tests of what a client says when the endpoint is wrong. Each connection is served on a
// thread of its own for at most 30 s; the destructor ends them all. describe() says what it saw,
// for a failed assertion.
#pragma once

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ports.h"

namespace ddprun::test {

class FakePeer {
 public:
  enum class Kind {
    kHttp,    // reads a line, answers "HTTP/1.1 400 Bad Request" and closes (nginx, Go, etcd)
    kHttp09,  // reads a line, answers a bare HTML page and closes (Python's http.server)
    kSsh,     // greets with an SSH banner, then waits for the client's
    kSilent,  // accepts and says nothing
    kClose,   // accepts and closes at once
    kBinary,  // answers anything with bytes of no protocol, a terminal escape among them
  };
  // Serves one connection; returns when done (the caller closes `fd`). `stopping` turns true when
  // the FakePeer is being destroyed.
  using Serve = std::function<void(int fd, const std::atomic<bool>& stopping)>;

  explicit FakePeer(Kind kind) : FakePeer(serveAs(kind)) {}
  explicit FakePeer(Serve serve) : serve_(std::move(serve)) {
    listener_ = listenOnLoopback(port_, 64);
    accepter_ = std::thread([this] { acceptLoop(); });
  }
  ~FakePeer() {
    stopping_ = true;
    accepter_.join();
    ::close(listener_);
    for (auto& thread : connections_) thread.join();
  }
  FakePeer(const FakePeer&) = delete;
  FakePeer& operator=(const FakePeer&) = delete;

  std::uint16_t port() const { return port_; }
  int accepted() const { return accepted_; }
  // "N connections; the first sent: '...'" (its first bytes, hex-escaped where not text).
  std::string describe() const {
    std::lock_guard lock(mutex_);
    std::string shown;
    for (const char c : firstBytes_) {
      const auto byte = static_cast<unsigned char>(c);
      shown += byte >= 0x20 && byte < 0x7f ? std::string(1, c) : fmt::format("\\x{:02x}", byte);
    }
    return fmt::format("the fake peer accepted {} connections; the first sent it '{}'",
                       accepted_.load(), shown);
  }

  // Reads until a line end, the peer closes, `stopping` or 5 s; keeps what came for describe().
  std::string readLine(int fd, const std::atomic<bool>& stopping) {
    std::string line;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (line.find('\n') == std::string::npos && !stopping &&
           std::chrono::steady_clock::now() < end) {
      if (!readable(fd, 50)) continue;
      char chunk[512];
      const ssize_t got = ::recv(fd, chunk, sizeof chunk, 0);
      if (got <= 0) break;
      line.append(chunk, static_cast<std::size_t>(got));
      remember(chunk, static_cast<std::size_t>(got));
    }
    return line;
  }
  // Waits until the peer closes, `stopping` or 30 s; keeps what came for describe().
  void holdUntilClosed(int fd, const std::atomic<bool>& stopping) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!stopping && std::chrono::steady_clock::now() < end) {
      if (!readable(fd, 50)) continue;
      char chunk[512];
      const ssize_t got = ::recv(fd, chunk, sizeof chunk, 0);
      if (got <= 0) return;
      remember(chunk, static_cast<std::size_t>(got));
    }
  }
  static void sendAll(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (sent <= 0) return;
      bytes.remove_prefix(static_cast<std::size_t>(sent));
    }
  }

 private:
  static bool readable(int fd, int milliseconds) {
    pollfd ready{fd, POLLIN, 0};
    return ::poll(&ready, 1, milliseconds) > 0;
  }

  Serve serveAs(Kind kind) {
    return [this, kind](int fd, const std::atomic<bool>& stopping) {
      switch (kind) {
        case Kind::kHttp:
          readLine(fd, stopping);
          sendAll(fd, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
          return;
        case Kind::kHttp09:
          readLine(fd, stopping);
          sendAll(fd, "<!DOCTYPE HTML>\n<html lang=\"en\"><body>Error response</body></html>\n");
          return;
        case Kind::kSsh:
          sendAll(fd, "SSH-2.0-OpenSSH_9.2\r\n");
          holdUntilClosed(fd, stopping);
          return;
        case Kind::kSilent:
          holdUntilClosed(fd, stopping);
          return;
        case Kind::kClose:
          return;
        case Kind::kBinary:
          if (readable(fd, 5000)) sendAll(fd, "\x1b[31mBOO\x07\x01\x02\xff");
          holdUntilClosed(fd, stopping);
          return;
      }
    };
  }

  void acceptLoop() {
    while (!stopping_) {
      if (!readable(listener_, 50)) continue;
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++accepted_;
      connections_.emplace_back([this, fd] {
        serve_(fd, stopping_);
        ::close(fd);
      });
    }
  }

  void remember(const char* bytes, std::size_t size) {
    std::lock_guard lock(mutex_);
    if (firstBytes_.size() < 128)
      firstBytes_.append(bytes, std::min(size, 128 - firstBytes_.size()));
  }

  Serve serve_;
  std::uint16_t port_ = 0;
  int listener_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepted_{0};
  std::thread accepter_;
  std::vector<std::thread> connections_;  // touched by the accepter only, until the destructor
  mutable std::mutex mutex_;
  std::string firstBytes_;  // what the first connections sent, for describe()
};

}  // namespace ddprun::test
