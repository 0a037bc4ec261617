// ddprun-delay-forwarder: a link with a one-way delay, in user space, for this kernel has no netem
// (and no tc qdisc to add one). It runs in a namespace between two hosts' namespaces, accepts TCP
// connections on LISTEN_ADDR, opens one to TARGET for each, and hands every chunk it reads from
// either side to the other side DELAY_US microseconds after it arrived: a timestamp per chunk, a
// FIFO per direction (nothing is reordered, every chunk waits the same delay), TCP_NODELAY on both
// sockets (a chunk leaves as one segment when it is due, never held back by Nagle), one thread,
// level-triggered epoll, and a timerfd armed for the next chunk due (timer slack 1 ns).
//
// What it models: a request crosses the link after DELAY_US, its reply comes back after DELAY_US
// more, so every request/reply exchange over it takes one round trip of 2 x DELAY_US on top of the
// hosts' own time, as across a network whose one-way delay is DELAY_US. What it does not: the TCP
// handshake ends at the forwarder (a connect() returns without waiting for the delay; the first
// request then waits it), and there is no bandwidth limit or loss. It is a TCP-level forwarder,
// not a frame bridge, because a frame bridge between veth ends would need the checksum and
// segmentation offloads of both veths turned off (packet sockets see unsummed, unsegmented
// frames) with ethtool, which this VM lacks; the store's workload is request/reply, where what a
// network adds is the round trip, and that is what this adds.
//
//   ddprun-delay-forwarder LISTEN_ADDR TARGET_ADDR TARGET_PORT DELAY_US
//
// Prints "listening on ADDR:PORT" once it accepts (LISTEN_ADDR's port is 0: a free one), then
// forwards until killed. A side that closes is closed on the other side after the delay too.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using Nanos = std::int64_t;

Nanos now() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return Nanos{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

// A read queued for the other side; an empty `bytes` is the side's end of stream.
struct Chunk {
  Nanos due;
  std::string bytes;
  std::size_t sent = 0;
};

// One direction of a connection: what `from` sent, waiting to be written to `to`.
struct Direction {
  int from = -1;
  int to = -1;
  std::deque<Chunk> queue;
  std::size_t queued = 0;  // bytes waiting
  bool reading = true;     // `from` is watched for reads
  bool ended = false;      // the end of stream was delivered (shutdown of `to`)
};

struct Link {
  Direction up;    // client -> target
  Direction down;  // target -> client
};

// Reading stops while a direction holds this much (a peer that does not read): memory stays bounded.
constexpr std::size_t kMaxQueued = 4 << 20;
// A chunk the kernel did not take all of (the peer's buffer is full) is retried after this long.
constexpr Nanos kRetry = 50'000;

bool parseAddress(const char* text, std::uint16_t port, sockaddr_in& out) {
  out = {};
  out.sin_family = AF_INET;
  out.sin_port = htons(port);
  return ::inet_pton(AF_INET, text, &out.sin_addr) == 1;
}

void noDelay(int fd) {
  const int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

class Forwarder {
 public:
  Forwarder(int listener, sockaddr_in target, Nanos delay)
      : listener_(listener), target_(target), delay_(delay) {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    timer_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    watch(listener_, EPOLLIN);
    watch(timer_, EPOLLIN);
  }

  void run() {
    std::vector<epoll_event> events(256);
    for (;;) {
      const int count = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), -1);
      if (count < 0 && errno != EINTR) {
        std::perror("delay forwarder: epoll_wait");
        return;
      }
      for (int i = 0; i < count; ++i) {
        const int fd = events[i].data.fd;
        if (fd == listener_) {
          accept();
        } else if (fd == timer_) {
          std::uint64_t expirations = 0;
          [[maybe_unused]] auto ignored = ::read(timer_, &expirations, sizeof expirations);
        } else {
          readFrom(fd);
        }
      }
      deliver();
    }
  }

 private:
  void watch(int fd, std::uint32_t events) {
    epoll_event event{};
    event.events = events;
    event.data.fd = fd;
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &event);
  }

  // Out of epoll altogether while not reading: a socket at its end of stream (or shut down both
  // ways) would otherwise report EPOLLHUP on every wait, a busy loop until its chunk is due.
  void setReading(Direction& direction, bool reading) {
    if (direction.reading == reading) return;
    direction.reading = reading;
    if (reading) {
      watch(direction.from, EPOLLIN);
    } else {
      ::epoll_ctl(epoll_, EPOLL_CTL_DEL, direction.from, nullptr);
    }
  }

  void accept() {
    const int client = ::accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client < 0) return;
    // The target is one veth away: this connect completes at once (see the header: the
    // handshake is not delayed).
    const int upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (upstream < 0 ||
        ::connect(upstream, reinterpret_cast<const sockaddr*>(&target_), sizeof target_) != 0) {
      std::fprintf(stderr, "delay forwarder: cannot connect to the target: %s\n",
                   std::strerror(errno));
      if (upstream >= 0) ::close(upstream);
      ::close(client);
      return;
    }
    ::fcntl(upstream, F_SETFL, ::fcntl(upstream, F_GETFL) | O_NONBLOCK);
    noDelay(client);
    noDelay(upstream);
    auto link = std::make_shared<Link>();
    link->up.from = client;
    link->up.to = upstream;
    link->down.from = upstream;
    link->down.to = client;
    links_[client] = link;
    links_[upstream] = link;
    watch(client, EPOLLIN);
    watch(upstream, EPOLLIN);
  }

  void readFrom(int fd) {
    const auto found = links_.find(fd);
    if (found == links_.end()) return;
    const std::shared_ptr<Link> link = found->second;
    Direction& direction = link->up.from == fd ? link->up : link->down;
    char buffer[64 * 1024];
    const ssize_t bytes = ::recv(fd, buffer, sizeof buffer, 0);
    if (bytes < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      drop(*link);  // reset: the other side is reset at once, not after the delay
      return;
    }
    const Nanos due = now() + delay_;
    direction.queue.push_back(Chunk{due, std::string(buffer, static_cast<std::size_t>(bytes))});
    direction.queued += static_cast<std::size_t>(bytes);
    if (bytes == 0 || direction.queued > kMaxQueued) setReading(direction, false);
  }

  // Writes what is due in `direction`; returns when the next of its chunks is due (or nothing).
  // `broken`: the peer is gone (the link is dropped).
  std::optional<Nanos> deliver(Direction& direction, Nanos at, bool& broken) {
    while (!direction.queue.empty() && direction.queue.front().due <= at) {
      Chunk& chunk = direction.queue.front();
      if (chunk.bytes.empty()) {
        ::shutdown(direction.to, SHUT_WR);
        direction.ended = true;
        direction.queue.clear();
        return std::nullopt;
      }
      const ssize_t sent = ::send(direction.to, chunk.bytes.data() + chunk.sent,
                                  chunk.bytes.size() - chunk.sent, MSG_NOSIGNAL);
      if (sent < 0) {
        if (errno == EAGAIN || errno == EINTR) return at + kRetry;
        broken = true;
        return std::nullopt;
      }
      chunk.sent += static_cast<std::size_t>(sent);
      direction.queued -= static_cast<std::size_t>(sent);
      if (chunk.sent < chunk.bytes.size()) return at + kRetry;
      direction.queue.pop_front();
    }
    if (direction.queued <= kMaxQueued / 2 && !direction.ended &&
        (direction.queue.empty() || !direction.queue.back().bytes.empty())) {
      setReading(direction, true);
    }
    if (direction.queue.empty()) return std::nullopt;
    return direction.queue.front().due;
  }

  void deliver() {
    const Nanos at = now();
    std::optional<Nanos> next;
    std::vector<std::shared_ptr<Link>> finished;
    for (const auto& [fd, link] : links_) {
      if (fd != link->up.from) continue;  // each link once
      bool broken = false;
      for (Direction* direction : {&link->up, &link->down}) {
        const auto due = deliver(*direction, at, broken);
        if (due && (!next || *due < *next)) next = due;
      }
      if (broken || (link->up.ended && link->down.ended)) finished.push_back(link);
    }
    for (const auto& link : finished) drop(*link);
    itimerspec when{};
    if (next) {
      when.it_value.tv_sec = *next / 1'000'000'000;
      when.it_value.tv_nsec = *next % 1'000'000'000;
      if (when.it_value.tv_sec == 0 && when.it_value.tv_nsec == 0) when.it_value.tv_nsec = 1;
    }
    ::timerfd_settime(timer_, TFD_TIMER_ABSTIME, &when, nullptr);  // zero disarms
  }

  void drop(Link& link) {
    const int client = link.up.from;
    const int upstream = link.down.from;
    ::close(client);
    ::close(upstream);
    links_.erase(client);  // may destroy `link`: nothing of it is used after this
    links_.erase(upstream);
  }

  int listener_;
  sockaddr_in target_;
  Nanos delay_;
  int epoll_ = -1;
  int timer_ = -1;
  std::unordered_map<int, std::shared_ptr<Link>> links_;  // both sockets of a link -> the link
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: ddprun-delay-forwarder LISTEN_ADDR TARGET_ADDR TARGET_PORT DELAY_US\n");
    return 2;
  }
  const long targetPort = std::strtol(argv[3], nullptr, 10);
  const long delayUs = std::strtol(argv[4], nullptr, 10);
  sockaddr_in listen{};
  sockaddr_in target{};
  if (!parseAddress(argv[1], 0, listen) || !parseAddress(argv[2], 0, target) || targetPort <= 0 ||
      targetPort > 65535 || delayUs < 0 || delayUs > 10'000'000) {
    std::fprintf(stderr, "ddprun-delay-forwarder: give IPv4 addresses, a port 1..65535 and a "
                         "delay of 0..10000000 us\n");
    return 2;
  }
  target.sin_port = htons(static_cast<std::uint16_t>(targetPort));
  // Timers fire when asked, not up to 50 us later (the default slack): the delay is the delay.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  socklen_t length = sizeof listen;
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&listen), sizeof listen) != 0 ||
      ::listen(listener, 4096) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&listen), &length) != 0) {
    std::fprintf(stderr, "ddprun-delay-forwarder: cannot listen on %s: %s\n", argv[1],
                 std::strerror(errno));
    return 1;
  }
  std::printf("listening on %s:%u\n", argv[1], ntohs(listen.sin_port));
  std::fflush(stdout);
  Forwarder(listener, target, Nanos{delayUs} * 1000).run();
  return 1;
}
