// ddprun-delay-forwarder: a network link with a one-way delay, in user space, for this kernel has
// no netem (no tc qdisc can add one). It joins two network namespaces ("hosts") with a
// point-to-point IP link made of two TUN devices, one in each, and moves every IP packet from one
// to the other DELAY_US microseconds after the kernel handed it over: a timestamp per packet, a
// FIFO per direction (nothing is reordered, every packet waits the same delay), one thread, epoll,
// and a timerfd armed for the next packet due (timer slack 1 ns, so that the delay is the delay).
//
// It is a packet-level link, not a TCP-level proxy: every packet waits, the TCP handshake's SYN and
// SYN-ACK, data and ACKs alike, so connect() takes a round trip, a delayed ACK or Nagle's algorithm
// costs what it costs on a network, and the hosts' own TCP stacks talk to each other end to end.
// A frame bridge between veth pairs would do the same, but packet sockets on a veth see frames
// whose checksums are left to offloads (and segments up to 64 KiB), which only ethtool can turn
// off, and this VM has no ethtool; a TUN device without offloads hands over whole, checksummed
// IP packets of at most its MTU. No bandwidth limit, no loss.
//
//   ddprun-delay-forwarder NETNS_A NETNS_B DELAY_US
//
// Makes a TUN device "dly0" in each namespace (named as in /var/run/netns, `ip netns add`), prints
// "ready" once both exist, and moves packets until killed; the devices go with it. The caller
// gives them addresses, e.g. `ip -n A addr add 10.0.0.1 peer 10.0.0.2 dev dly0` and the mirror in
// B, and sets them up. Needs root (setns, TUN). A namespace or TUN device it cannot use is one
// line on stderr and exit code 2.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace {

using Nanos = std::int64_t;

Nanos now() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return Nanos{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

struct Packet {
  Nanos due;
  std::string bytes;
};

// One direction of the link: packets read from `from`, waiting to be written to `to`.
struct Direction {
  int from = -1;
  int to = -1;
  std::deque<Packet> queue;
  std::size_t queued = 0;
};

// Packets beyond this many bytes in flight in one direction are dropped, as a router's full
// queue drops them: memory stays bounded, TCP backs off. Far above what a store's requests fill.
constexpr std::size_t kMaxQueued = 16 << 20;

// Opens a TUN device named "dly0" in the network namespace `name`; -1 with a line on failure.
int openTun(const char* name) {
  const std::string path = std::string("/var/run/netns/") + name;
  const bool isName = std::strchr(name, '/') == nullptr;  // a name, not a path
  if (!isName) errno = EINVAL;
  const int ns = isName ? ::open(path.c_str(), O_RDONLY | O_CLOEXEC) : -1;
  if (ns < 0 || ::setns(ns, CLONE_NEWNET) != 0) {
    std::fprintf(stderr,
                 "ddprun-delay-forwarder: cannot enter network namespace %s: %s (name one "
                 "that `ip netns list` shows, as root)\n",
                 name, std::strerror(errno));
    if (ns >= 0) ::close(ns);
    return -1;
  }
  ::close(ns);
  const int tun = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  ifreq request{};
  request.ifr_flags = IFF_TUN | IFF_NO_PI;
  std::strncpy(request.ifr_name, "dly0", IFNAMSIZ - 1);
  if (tun < 0 || ::ioctl(tun, TUNSETIFF, &request) != 0) {
    std::fprintf(stderr, "ddprun-delay-forwarder: cannot make a TUN device in %s: %s\n", name,
                 std::strerror(errno));
    if (tun >= 0) ::close(tun);
    return -1;
  }
  return tun;
}

void pollIn(int epoll, int fd) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = fd;
  ::epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event);
}

// Reads every packet waiting on `direction.from` into its queue, due `delay` from now.
void readPackets(Direction& direction, Nanos delay) {
  char buffer[64 * 1024];
  for (;;) {
    const ssize_t bytes = ::read(direction.from, buffer, sizeof buffer);
    if (bytes <= 0) return;  // EAGAIN: all read
    if (direction.queued + static_cast<std::size_t>(bytes) > kMaxQueued) continue;  // dropped
    direction.queue.push_back(
        Packet{now() + delay, std::string(buffer, static_cast<std::size_t>(bytes))});
    direction.queued += static_cast<std::size_t>(bytes);
  }
}

// Writes the packets that are due; returns when the next one is (or nothing when none waits).
std::optional<Nanos> deliver(Direction& direction, Nanos at) {
  while (!direction.queue.empty() && direction.queue.front().due <= at) {
    const Packet& packet = direction.queue.front();
    // A TUN write hands the whole packet to the namespace's stack at once; a failure is a loss.
    [[maybe_unused]] const ssize_t ignored =
        ::write(direction.to, packet.bytes.data(), packet.bytes.size());
    direction.queued -= packet.bytes.size();
    direction.queue.pop_front();
  }
  if (direction.queue.empty()) return std::nullopt;
  return direction.queue.front().due;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: ddprun-delay-forwarder NETNS_A NETNS_B DELAY_US\n");
    return 2;
  }
  char* end = nullptr;
  const long delayUs = std::strtol(argv[3], &end, 10);
  if (*end != '\0' || delayUs < 0 || delayUs > 10'000'000) {
    std::fprintf(stderr, "ddprun-delay-forwarder: DELAY_US must be 0..10000000 microseconds\n");
    return 2;
  }
  const Nanos delay = Nanos{delayUs} * 1000;
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  const int a = openTun(argv[1]);
  if (a < 0) return 2;
  const int b = openTun(argv[2]);
  if (b < 0) return 2;
  std::printf("ready\n");
  std::fflush(stdout);

  Direction forward;  // A -> B
  forward.from = a;
  forward.to = b;
  Direction backward;  // B -> A
  backward.from = b;
  backward.to = a;
  const int epoll = ::epoll_create1(EPOLL_CLOEXEC);
  const int timer = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  pollIn(epoll, a);
  pollIn(epoll, b);
  pollIn(epoll, timer);
  epoll_event events[3];
  for (;;) {
    const int count = ::epoll_wait(epoll, events, 3, -1);
    if (count < 0 && errno != EINTR) {
      std::perror("ddprun-delay-forwarder: epoll_wait");
      return 1;
    }
    for (int i = 0; i < count; ++i) {
      const int fd = events[i].data.fd;
      if (fd == a) readPackets(forward, delay);
      if (fd == b) readPackets(backward, delay);
      if (fd == timer) {
        std::uint64_t expirations = 0;
        [[maybe_unused]] const ssize_t ignored = ::read(timer, &expirations, sizeof expirations);
      }
    }
    const Nanos at = now();
    std::optional<Nanos> next = deliver(forward, at);
    if (const auto due = deliver(backward, at); due && (!next || *due < *next)) next = due;
    itimerspec when{};  // zero: disarmed
    if (next) {
      when.it_value.tv_sec = *next / 1'000'000'000;
      when.it_value.tv_nsec = *next % 1'000'000'000;
    }
    ::timerfd_settime(timer, TFD_TIMER_ABSTIME, &when, nullptr);
  }
}
