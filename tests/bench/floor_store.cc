#include "floor_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "ports.h"  // loopbackAddress
#include "protocol/wire.h"

namespace ddprun::bench {

namespace {

namespace wire = ddprun::rendezvous::protocol;
using ddprun::rendezvous::WireDialect;

struct Connection {
  std::string in;
  std::size_t begin = 0;
  int dialect = -1;  // -1 not known yet, else a WireDialect
};

struct Floor {
  std::unordered_map<std::string, std::string> values;
  std::unordered_map<std::string, std::int64_t> counters;
  std::string out;

  // Handles the complete requests at the front of `c.in`; false: the connection is to close.
  bool serve(Connection& c) {
    const auto* data = reinterpret_cast<const unsigned char*>(c.in.data());
    const std::size_t size = c.in.size();
    for (;;) {
      std::size_t at = c.begin;
      auto have = [&](std::size_t n) { return size - at >= n; };
      if (!have(1)) break;
      if (c.dialect < 0) {
        if (data[at] != 0) {
          c.dialect = static_cast<int>(WireDialect::kTorch113);
        } else if (!have(5)) {
          break;
        } else {
          c.dialect = static_cast<int>(wire::getU32(data + at + 1) == wire::kValidationMagic
                                           ? WireDialect::kTorch2
                                           : WireDialect::kTorch113);
        }
      }
      const auto op = wire::opFromWire(static_cast<WireDialect>(c.dialect), data[at++]);
      if (!op) return false;
      std::string_view blobs[2];
      auto blob = [&](std::string_view& into) {
        if (!have(8)) return false;
        const std::uint64_t n = wire::getU64(data + at);
        if (size - at - 8 < n) return false;
        into = std::string_view(reinterpret_cast<const char*>(data + at + 8), n);
        at += 8 + n;
        return true;
      };
      bool complete = true;
      switch (*op) {
        case wire::Op::kValidate:
        case wire::Op::kPing:
          if (!have(4)) {
            complete = false;
            break;
          }
          if (*op == wire::Op::kPing) out.append(c.in, at, 4);
          at += 4;
          break;
        case wire::Op::kSet:
          complete = blob(blobs[0]) && blob(blobs[1]);
          if (complete) values[std::string(blobs[0])] = std::string(blobs[1]);
          break;
        case wire::Op::kGet:
          complete = blob(blobs[0]);
          if (complete) wire::putBlob(out, values[std::string(blobs[0])]);
          break;
        case wire::Op::kCompareSet: {
          std::string_view desired;
          complete = blob(blobs[0]) && blob(blobs[1]) && blob(desired);
          if (!complete) break;
          auto [entry, created] = values.try_emplace(std::string(blobs[0]));
          if (created && !blobs[1].empty()) {
            values.erase(entry);
            wire::putBlob(out, blobs[1]);
            break;
          }
          if (created || entry->second == blobs[1]) entry->second = std::string(desired);
          wire::putBlob(out, entry->second);
          break;
        }
        case wire::Op::kAdd:
          complete = blob(blobs[0]) && have(8);
          if (complete) {
            const auto delta = static_cast<std::int64_t>(wire::getU64(data + at));
            at += 8;
            wire::putI64(out, counters[std::string(blobs[0])] += delta);
          }
          break;
        case wire::Op::kWait: {
          // Only keys that are present: the benchmark sets its key before it waits for it.
          complete = have(8);
          if (!complete) break;
          std::uint64_t n = wire::getU64(data + at);
          at += 8;
          while (complete && n-- > 0) complete = blob(blobs[0]);
          if (complete) wire::putU8(out, wire::kStopWaiting);
          break;
        }
        default:
          return false;
      }
      if (!complete) break;
      c.begin = at;
    }
    c.in.erase(0, c.begin);
    c.begin = 0;
    return true;
  }
};

}  // namespace

int serveFloorStore() {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address = ddprun::test::loopbackAddress(0);
  socklen_t length = sizeof address;
  const int on = 1;
  ::setsockopt(listener, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);  // inherited by accepted ones
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener, 4096) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    std::fprintf(stderr, "floor store: cannot listen: %s\n", std::strerror(errno));
    return 1;
  }
  std::printf("listening on 127.0.0.1:%d\n", ntohs(address.sin_port));
  std::fflush(stdout);
  const int epoll = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = listener;
  ::epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &event);
  std::unordered_map<int, Connection> connections;
  Floor floor;
  std::vector<epoll_event> events(512);
  char buffer[64 * 1024];
  for (;;) {
    const int n = ::epoll_wait(epoll, events.data(), static_cast<int>(events.size()), -1);
    for (int e = 0; e < n; ++e) {
      const int fd = events[e].data.fd;
      if (fd == listener) {
        const int client = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (client < 0) continue;
        connections[client];
        epoll_event ready{};
        ready.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
        ready.data.fd = client;
        ::epoll_ctl(epoll, EPOLL_CTL_ADD, client, &ready);
        continue;
      }
      Connection& c = connections[fd];
      bool open = true;
      for (;;) {  // until drained: a short read means the kernel had no more
        const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
        if (got <= 0) {
          open = got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
          break;
        }
        c.in.append(buffer, static_cast<std::size_t>(got));
        if (static_cast<std::size_t>(got) < sizeof buffer) break;
      }
      if (open) open = floor.serve(c);
      if (open && !floor.out.empty()) {
        // Replies are a few bytes and the peer waits for them: the socket buffer takes them.
        open = ::send(fd, floor.out.data(), floor.out.size(), MSG_NOSIGNAL) ==
               static_cast<ssize_t>(floor.out.size());
      }
      floor.out.clear();
      if (!open) {
        ::close(fd);
        connections.erase(fd);
      }
    }
  }
}

}  // namespace ddprun::bench
