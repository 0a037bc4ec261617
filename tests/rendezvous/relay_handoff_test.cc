// The relay's handoff (ddprun/rendezvous/relay_handoff_wire.h), over real sockets: the shim's own
// connect(), loaded here with dlopen (as LD_PRELOAD puts it in front of libc's), asks the relay on
// its handoff socket and gets a connection to the store that has proved the token, in place of
// the socket it was given, with the socket's flags kept; whatever cannot be handed off connects
// to the relay as before, and a connection anywhere else is never touched.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ddprun/rendezvous/loopback_relay.h"
#include "ddprun/rendezvous/relay_handoff_wire.h"
#include "ports.h"
#include "raw_client.h"
#include "temp_dir.h"
#include "test_certificate.h"
#include "test_secrets.h"
#include "test_server.h"
#include "waits.h"

using namespace ddprun::rendezvous;
using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

using ConnectFn = int (*)(int, const sockaddr*, socklen_t);

// The shim's connect(), from the library the build made.
ConnectFn shimConnect() {
  static void* library = ::dlopen(DDPRUN_HANDOFF_SHIM, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(library != nullptr);
  auto* found = reinterpret_cast<ConnectFn>(::dlsym(library, "connect"));
  REQUIRE(found != nullptr);
  return found;
}

ServerOptions withToken(const JobSecret& secret) {
  ServerOptions options;
  options.secret = secret;
  return options;
}

std::uint16_t peerPort(int fd) {
  sockaddr_in peer{};
  socklen_t length = sizeof peer;
  REQUIRE(::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) == 0);
  return ntohs(peer.sin_port);
}

// A torch 1.13 ADD of 1 to "k" and its reply, the new value (-1: no reply within 5 s).
long long addOne(int fd) {
  const std::string request = hex("03") + blob("k") + u64(1);
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    return -1;
  }
  std::string reply;
  while (reply.size() < 8) {
    pollfd wait{fd, POLLIN, 0};
    if (::poll(&wait, 1, 5000) != 1) return -1;
    char bytes[8];
    const ssize_t got = ::recv(fd, bytes, 8 - reply.size(), 0);
    if (got <= 0) return -1;
    reply.append(bytes, static_cast<std::size_t>(got));
  }
  long long value = 0;
  std::memcpy(&value, reply.data(), sizeof value);
  return value;
}

// The variable the agent gives its workers, for the length of a test.
struct HandoffVariable {
  explicit HandoffVariable(const std::string& value) {
    ::setenv(DDPRUN_RELAY_HANDOFF_ENV, value.c_str(), 1);
  }
  ~HandoffVariable() { ::unsetenv(DDPRUN_RELAY_HANDOFF_ENV); }
};

struct HandoffRelay {
  explicit HandoffRelay(const JobSecret& storeSecret)
      : server(withToken(storeSecret)),
        relay(options(directory.path)),
        variable(relay.handoffVariable()) {}
  static RelayOptions options(const std::string& directory) {
    RelayOptions options{kSecret};
    options.handoffPath = directory + "/relay.sock";
    return options;
  }
  TempDir directory;
  TestServer server;
  LoopbackRelay relay;
  HandoffVariable variable;
};

}  // namespace

TEST_CASE("the shim gets the store connection itself, proven, with the socket's flags",
          "[relay][handoff]") {
  HandoffRelay setup(kSecret);
  REQUIRE(setup.relay.handoffVariable() ==
          fmt::format("{}:{}/relay.sock", setup.relay.port(), setup.directory.path));
  setup.relay.setUpstream("127.0.0.1", setup.server.port());
  // As torch 1.13 connects: a non-blocking, close-on-exec socket.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  const sockaddr_in relay = loopbackAddress(setup.relay.port());
  REQUIRE(shimConnect()(fd, reinterpret_cast<const sockaddr*>(&relay), sizeof relay) == 0);
  CHECK(peerPort(fd) == setup.server.port());  // the store, not the relay
  CHECK((::fcntl(fd, F_GETFL) & O_NONBLOCK) != 0);
  CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  CHECK(addOne(fd) == 1);  // served: the relay proved the token on it
  CHECK(addOne(fd) == 2);
  ::close(fd);
  // A blocking socket stays blocking.
  const int blocking = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(shimConnect()(blocking, reinterpret_cast<const sockaddr*>(&relay), sizeof relay) == 0);
  CHECK((::fcntl(blocking, F_GETFL) & O_NONBLOCK) == 0);
  CHECK((::fcntl(blocking, F_GETFD) & FD_CLOEXEC) == 0);
  CHECK(addOne(blocking) == 3);
  ::close(blocking);
  // The relay counts a handoff once its thread is done with it, which may be after the shim has
  // the connection (an ASan build on a busy machine once read 1 here).
  CHECK(eventually([&] { return setup.relay.stats().handedOff == 2; }, 10s,
                   [&] { return fmt::format("{} handed off", setup.relay.stats().handedOff); }));
  const LoopbackRelay::Stats stats = setup.relay.stats();
  CHECK(stats.handedOff == 2);
  CHECK(stats.accepted == 0);  // no byte went through the relay's port
  CHECK(stats.upstreamFailures == 0);
}

TEST_CASE("what cannot be handed off connects to the relay as before", "[relay][handoff]") {
  SECTION("before a round has formed, the relay says so and the port refuses as always") {
    HandoffRelay setup(kSecret);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    const sockaddr_in relay = loopbackAddress(setup.relay.port());
    REQUIRE(shimConnect()(fd, reinterpret_cast<const sockaddr*>(&relay), sizeof relay) == 0);
    CHECK(peerPort(fd) == setup.relay.port());
    CHECK(addOne(fd) == -1);  // closed without a reply, as the relay does before a round
    ::close(fd);
    CHECK(setup.relay.stats().handedOff == 0);
  }
  SECTION("a store with another token: the handoff fails, and so does the relay, said once") {
    HandoffRelay setup(kOther);
    setup.relay.setUpstream("127.0.0.1", setup.server.port());
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    const sockaddr_in relay = loopbackAddress(setup.relay.port());
    REQUIRE(shimConnect()(fd, reinterpret_cast<const sockaddr*>(&relay), sizeof relay) == 0);
    CHECK(peerPort(fd) == setup.relay.port());
    CHECK(addOne(fd) == -1);
    ::close(fd);
    CHECK(setup.relay.stats().handedOff == 0);
    // The handoff's try, then the relay's (counted once the worker's connection is closed).
    CHECK(eventually(
        [&] { return setup.relay.stats().upstreamFailures == 2; }, 3s,
        [&] { return fmt::format("{} failures", setup.relay.stats().upstreamFailures); }));
  }
  SECTION("the handoff socket is gone (the agent ended): the worker gets the port's answer") {
    std::uint16_t port = 0;
    std::string variable;
    {
      HandoffRelay setup(kSecret);
      port = setup.relay.port();
      variable = setup.relay.handoffVariable();
    }
    HandoffVariable again(variable);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    const sockaddr_in relay = loopbackAddress(port);
    CHECK(shimConnect()(fd, reinterpret_cast<const sockaddr*>(&relay), sizeof relay) == -1);
    CHECK(errno == ECONNREFUSED);
    ::close(fd);
  }
}

TEST_CASE("the shim leaves every other connection alone", "[relay][handoff]") {
  HandoffRelay setup(kSecret);
  setup.relay.setUpstream("127.0.0.1", setup.server.port());
  // Straight to the store: its port is not the relay's, so nothing is asked.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const sockaddr_in store = loopbackAddress(setup.server.port());
  REQUIRE(shimConnect()(fd, reinterpret_cast<const sockaddr*>(&store), sizeof store) == 0);
  CHECK(peerPort(fd) == setup.server.port());
  ::close(fd);
  // A malformed variable is no variable: the relay's port, connected as asked.
  HandoffVariable malformed(fmt::format("{}", setup.relay.port()));
  const int relayed = ::socket(AF_INET, SOCK_STREAM, 0);
  const sockaddr_in relay = loopbackAddress(setup.relay.port());
  REQUIRE(shimConnect()(relayed, reinterpret_cast<const sockaddr*>(&relay), sizeof relay) == 0);
  CHECK(peerPort(relayed) == setup.relay.port());
  ::close(relayed);
  CHECK(setup.relay.stats().handedOff == 0);
}

TEST_CASE("with TLS the relay takes no handoffs", "[relay][handoff]") {
  // TLS's session lives in the relay: no socket to give, no variable for the workers.
  TempDir directory;
  RelayOptions options{kSecret};
  options.handoffPath = directory.path + "/relay.sock";
  const TestCertificate files = writeSelfSignedCertificate(directory.path, "store");
  options.tls = TlsConfig::load({files.certificate, "", ""});
  LoopbackRelay relay(std::move(options));
  CHECK(relay.handoffVariable().empty());
  CHECK(::access((directory.path + "/relay.sock").c_str(), F_OK) != 0);
}
