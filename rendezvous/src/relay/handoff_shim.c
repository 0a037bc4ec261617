/* The relay's handoff shim: preloaded into Python workers under a token (LD_PRELOAD), it takes
 * the relay's hop off their store connections. relay_handoff_wire.h says what it asks and gets.
 *
 * Why: through the relay every request and reply crosses two more sockets and wakes the relay's
 * thread (docs/benchmarks.md, "The relay across a network"). Here the relay only connects to the
 * store and proves the token, and then gives the proven connection to the worker, whose
 * requests go straight to the store. The relay's checks stay where they were: the handoff socket
 * lies in the agent's private directory (mode 0700) and the relay serves only its own user
 * (SO_PEERCRED), so a stranger gets no more than through the relay's port.
 *
 * Only connect() to the relay's own port on 127.0.0.1 is touched; every other call goes to the
 * real connect() at once. Built with libc alone and without the sanitizers: it is loaded into
 * processes that are not ours.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ddprun/rendezvous/relay_handoff_wire.h"

typedef int (*connect_fn)(int, const struct sockaddr*, socklen_t);

static connect_fn real_connect(void) {
  /* Benign race: every thread stores the same address. */
  static connect_fn found;
  if (found == NULL) found = (connect_fn)dlsym(RTLD_NEXT, "connect");
  return found;
}

/* The relay's port and handoff socket from the environment; 0 when there is none or it is not
 * "<port>:<absolute path>" with a path that fits a socket address. */
static unsigned relay_target(struct sockaddr_un* handoff) {
  const char* value = getenv(DDPRUN_RELAY_HANDOFF_ENV);
  if (value == NULL) return 0;
  char* end = NULL;
  errno = 0;
  const unsigned long port = strtoul(value, &end, 10);
  if (errno != 0 || end == value || *end != ':' || port == 0 || port > 65535) return 0;
  const char* path = end + 1;
  const size_t length = strlen(path);
  if (path[0] != '/' || length >= sizeof handoff->sun_path) return 0;
  memset(handoff, 0, sizeof *handoff);
  handoff->sun_family = AF_UNIX;
  memcpy(handoff->sun_path, path, length + 1);
  return (unsigned)port;
}

/* Whether `addr` is 127.0.0.1:port, as IPv4 or as an IPv4-mapped IPv6 address. */
static int is_relay(const struct sockaddr* addr, socklen_t length, unsigned port) {
  if (addr == NULL) return 0;
  if (addr->sa_family == AF_INET && length >= (socklen_t)sizeof(struct sockaddr_in)) {
    const struct sockaddr_in* in = (const struct sockaddr_in*)addr;
    return ntohs(in->sin_port) == port && ntohl(in->sin_addr.s_addr) == INADDR_LOOPBACK;
  }
  if (addr->sa_family == AF_INET6 && length >= (socklen_t)sizeof(struct sockaddr_in6)) {
    const struct sockaddr_in6* in6 = (const struct sockaddr_in6*)addr;
    static const unsigned char mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
    return ntohs(in6->sin6_port) == port && memcmp(&in6->sin6_addr, mapped, 16) == 0;
  }
  return 0;
}

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Asks the relay for a proven store connection; returns its descriptor, or -1 for "connect to
 * the relay instead". */
static int ask_relay(const struct sockaddr_un* handoff) {
  const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  if (real_connect()(s, (const struct sockaddr*)handoff, sizeof *handoff) != 0) {
    close(s);
    return -1;
  }
  const long long deadline = now_ms() + DDPRUN_HANDOFF_WAIT_MS;
  for (;;) {
    struct pollfd p = {s, POLLIN, 0};
    const long long left = deadline - now_ms();
    if (left <= 0) break;
    const int ready = poll(&p, 1, (int)left);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    char byte = 0;
    struct iovec data = {&byte, 1};
    union {
      struct cmsghdr header;
      char space[CMSG_SPACE(sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr message;
    memset(&message, 0, sizeof message);
    message.msg_iov = &data;
    message.msg_iovlen = 1;
    message.msg_control = control.space;
    message.msg_controllen = sizeof control.space;
    const ssize_t got = recvmsg(s, &message, MSG_CMSG_CLOEXEC);
    if (got < 0 && errno == EINTR) continue;
    int received = -1;
    const struct cmsghdr* header = got == 1 ? CMSG_FIRSTHDR(&message) : NULL;
    if (header != NULL && header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_RIGHTS &&
        header->cmsg_len == CMSG_LEN(sizeof(int))) {
      memcpy(&received, CMSG_DATA(header), sizeof received);
    }
    close(s);
    if (received >= 0 && byte != DDPRUN_HANDOFF_TAKEN) {
      close(received);
      received = -1;
    }
    return received;
  }
  close(s);
  return -1;
}

/* The options a client may set before it connects that a TCPStore client relies on: they belong
 * to the socket the worker made, so they are copied onto the one that takes its place. */
static void copy_options(int from, int to) {
  static const int levels[] = {SOL_SOCKET, SOL_SOCKET, SOL_SOCKET, IPPROTO_TCP};
  static const int names[] = {SO_KEEPALIVE, SO_RCVTIMEO, SO_SNDTIMEO, TCP_NODELAY};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    unsigned char value[sizeof(struct timeval)];
    socklen_t length = sizeof value;
    memset(value, 0, sizeof value);
    if (getsockopt(from, levels[i], names[i], value, &length) != 0) continue;
    /* Only what the worker set: the relay's TCP_NODELAY stays on a socket whose maker left it off. */
    int set = 0;
    for (socklen_t b = 0; b < length; ++b) set |= value[b];
    if (set) setsockopt(to, levels[i], names[i], value, length);
  }
}

int connect(int fd, const struct sockaddr* addr, socklen_t length) {
  struct sockaddr_un handoff;
  const unsigned port = relay_target(&handoff);
  int type = 0;
  socklen_t typeLength = sizeof type;
  if (port == 0 || !is_relay(addr, length, port) ||
      getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &typeLength) != 0 || type != SOCK_STREAM) {
    return real_connect()(fd, addr, length);
  }
  const int saved = errno;
  const int store = ask_relay(&handoff);
  if (store < 0) {
    errno = saved;
    return real_connect()(fd, addr, length);
  }
  /* The worker's descriptor becomes the store connection, its flags kept: O_NONBLOCK (a client
   * that connects without blocking still finds its socket so) and close-on-exec. */
  const int statusFlags = fcntl(fd, F_GETFL);
  const int descriptorFlags = fcntl(fd, F_GETFD);
  copy_options(fd, store);
  if (statusFlags < 0 || descriptorFlags < 0 ||
      dup3(store, fd, (descriptorFlags & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0) {
    close(store);
    errno = saved;
    return real_connect()(fd, addr, length);
  }
  close(store);
  fcntl(fd, F_SETFL, statusFlags);
  errno = saved;
  return 0;
}
