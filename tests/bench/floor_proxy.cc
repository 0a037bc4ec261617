#include "floor_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>

#include "ports.h"  // loopbackAddress

namespace {

void pollIn(int epoll, int fd) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = fd;
  ::epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event);
}

}  // namespace

FloorProxy::FloorProxy(std::uint16_t target) : target_(target) {
  listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address = ddprun::test::loopbackAddress(0);
  socklen_t length = sizeof address;
  if (::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener_, 65535) != 0 ||
      ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw std::runtime_error("floor proxy: cannot listen on 127.0.0.1");
  }
  port_ = ntohs(address.sin_port);
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  stop_ = ::eventfd(0, EFD_CLOEXEC);
  pollIn(epoll_, listener_);
  pollIn(epoll_, stop_);
  thread_ = std::thread([this] { run(); });
}

FloorProxy::~FloorProxy() {
  ::eventfd_write(stop_, 1);
  thread_.join();
  for (const auto& [fd, peer] : peer_) ::close(fd);
  ::close(listener_);
  ::close(epoll_);
  ::close(stop_);
}

void FloorProxy::run() {
  epoll_event events[256];
  char buffer[64 * 1024];
  for (;;) {
    const int ready = ::epoll_wait(epoll_, events, 256, -1);
    for (int i = 0; i < ready; ++i) {
      const int fd = events[i].data.fd;
      if (fd == stop_) return;
      if (fd == listener_) {
        accept();
        continue;
      }
      const auto found = peer_.find(fd);
      if (found == peer_.end()) continue;  // closed earlier in this batch
      const ssize_t got = ::read(fd, buffer, sizeof buffer);
      if (got < 0 && errno == EAGAIN) continue;
      // Blocking writes: store messages are small, the peer's buffer takes them whole.
      if (got <= 0 ||
          ::send(found->second, buffer, static_cast<std::size_t>(got), MSG_NOSIGNAL) != got) {
        close(fd);
      }
    }
  }
}

void FloorProxy::accept() {
  const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
  if (client < 0) return;
  const int upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_in address = ddprun::test::loopbackAddress(target_);
  if (::connect(upstream, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    ::close(client);
    ::close(upstream);
    return;
  }
  const int on = 1;
  ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  ::setsockopt(upstream, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  peer_[client] = upstream;
  peer_[upstream] = client;
  pollIn(epoll_, client);
  pollIn(epoll_, upstream);
}

void FloorProxy::close(int fd) {
  const auto found = peer_.find(fd);
  if (found == peer_.end()) return;
  const int other = found->second;
  peer_.erase(found);
  peer_.erase(other);
  ::close(fd);
  ::close(other);
}
