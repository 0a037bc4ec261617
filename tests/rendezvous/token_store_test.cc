// A store with a token, over real sockets: only clients that prove the token are served, anything
// else is closed without a reply byte, a wrong token is told apart at once, and unmodified
// (token-less) clients reach it through a LoopbackRelay with the store's semantics intact.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <random>
#include <thread>

#include "auth/handshake.h"
#include "ddprun/rendezvous/loopback_relay.h"
#include "ddprun/rendezvous/tcp_store.h"
#include "log_capture.h"
#include "raw_client.h"
#include "test_secrets.h"
#include "test_server.h"
#include "waits.h"

using namespace ddprun::rendezvous;
using namespace ddprun::test;
using namespace std::chrono_literals;

namespace {

ServerOptions withToken(std::chrono::milliseconds handshakeTimeout = 10s) {
  ServerOptions options;
  options.secret = kSecret;
  options.handshakeTimeout = handshakeTimeout;
  return options;
}

TcpStoreOptions clientWith(const TestServer& server, std::optional<JobSecret> secret,
                           WireDialect dialect = WireDialect::kTorch2) {
  TcpStoreOptions options = server.clientOptions(dialect);
  options.secret = std::move(secret);
  options.connectTimeout = 5s;
  return options;
}

// The server closes the connection and sends not one byte first.
bool closedWithoutReply(RawClient& raw, std::chrono::milliseconds timeout = 2s) {
  return !raw.receive(1, timeout) && raw.closedWithin(100ms);
}

// A raw connection that passes the handshake by hand (the bytes on the wire, as documented).
struct ProvenClient {
  explicit ProvenClient(std::uint16_t port, const JobSecret& secret = kSecret)
      : raw("127.0.0.1", port), handshake(secret) {
    raw.send(handshake.hello());
    challenge = raw.receive(auth::kServerChallengeBytes).value_or("");
  }
  RawClient raw;
  auth::ClientHandshake handshake;
  std::string challenge;
};

}  // namespace

TEST_CASE("with the token every operation works, in both dialects", "[token]") {
  TestServer server(withToken());
  for (const auto dialect : {WireDialect::kTorch2, WireDialect::kTorch113}) {
    TcpStore store(clientWith(server, kSecret, dialect));
    store.set("k", "v");
    CHECK(store.get("k") == "v");
    CHECK(store.add("n", 2) == 2);
    CHECK(store.compareSet("k", "v", "w") == "w");
    store.wait({"k"}, 1s);
    CHECK(store.deleteKey("k"));
    CHECK(store.deleteKey("n"));
  }
  CHECK(server.server().stats().refusedHandshakes == 0);
}

TEST_CASE("a client without the token gets no reply byte and a clear error", "[token]") {
  TestServer server(withToken());
  {
    TcpStore open(clientWith(server, kSecret));
    open.set("secret-key", "secret-value");
  }
  SECTION("ddprun's own client: StoreHandshakeError naming the token, in well under a second") {
    const auto started = std::chrono::steady_clock::now();
    try {
      TcpStore store(clientWith(server, std::nullopt));
      FAIL("connected without a token");
    } catch (const StoreHandshakeError& error) {
      CHECK_THAT(error.what(), Catch::Contains("token_file"));
    }
    CHECK(std::chrono::steady_clock::now() - started < 2s);
  }
  SECTION("a bare client sending torch 2.x's VALIDATE and PING: closed, nothing read back") {
    RawClient raw("127.0.0.1", server.port());
    raw.sendHex("00 cef7853c");
    raw.sendHex("0d 44332211");
    CHECK(closedWithoutReply(raw));
  }
  SECTION("a GET of a stored key, as the first bytes: closed without the value") {
    RawClient raw("127.0.0.1", server.port());
    raw.send(hex("02") + u64(11) + "/secret-key");
    CHECK(closedWithoutReply(raw));
  }
  SECTION("a LIST_KEYS sent after the magic's first bytes: closed, nothing read back") {
    RawClient raw("127.0.0.1", server.port());
    raw.send("ddpA");
    raw.send(hex("13"));
    CHECK(closedWithoutReply(raw));
  }
  CHECK(eventually(
      [&] { return server.server().stats().refusedHandshakes >= 1; }, 5s,
      [&] { return fmt::format("{} refused", server.server().stats().refusedHandshakes); }));
}

TEST_CASE("a wrong token: the client says so at once and the server closes without reply",
          "[token]") {
  TestServer server(withToken());
  const auto started = std::chrono::steady_clock::now();
  try {
    TcpStore store(clientWith(server, kOther));
    FAIL("connected with another token");
  } catch (const StoreAuthError& error) {
    CHECK(error.code() == StoreAuthError::Code::kWrongToken);
    CHECK_THAT(error.what(), Catch::Contains("refused this token"));
  }
  CHECK(std::chrono::steady_clock::now() - started < 1s);
  // A client that ignores the failed server proof and sends a proof under its own secret.
  ProvenClient liar(server.port(), kOther);
  REQUIRE(liar.challenge.size() == auth::kServerChallengeBytes);
  liar.raw.send(std::string(auth::kClientProofBytes, 'p') + hex("00 cef7853c 0d 2a000000"));
  CHECK(closedWithoutReply(liar.raw));
}

TEST_CASE("a replayed handshake fails", "[token]") {
  TestServer server(withToken());
  // Record a genuine exchange.
  ProvenClient genuine(server.port());
  std::string proof;
  REQUIRE(genuine.handshake.answer(genuine.challenge, proof) ==
          auth::ClientHandshake::Verdict::kAccepted);
  genuine.raw.send(proof);
  genuine.raw.sendHex("00 cef7853c");  // VALIDATE (2.x), then PING 42: served
  genuine.raw.sendHex("0d 2a000000");
  CHECK(genuine.raw.receive(4) == hex("2a000000"));
  // Replay the client's bytes on a new connection: the server's nonce differs, the proof fails.
  RawClient replay("127.0.0.1", server.port());
  replay.send(genuine.handshake.hello());
  REQUIRE(replay.receive(auth::kServerChallengeBytes));
  // One send: the server may close the connection as soon as it has read the proof.
  replay.send(proof + hex("00 cef7853c 0d 2a000000"));
  CHECK(closedWithoutReply(replay));
}

TEST_CASE("a connection that never finishes the handshake is closed at the deadline", "[token]") {
  TestServer server(withToken(300ms));
  RawClient silent("127.0.0.1", server.port());
  RawClient halfHello("127.0.0.1", server.port());
  halfHello.send("ddpAUTH1");
  CHECK(closedWithoutReply(silent, 3s));
  CHECK(closedWithoutReply(halfHello, 3s));
  TcpStore store(clientWith(server, kSecret));  // and the job's clients still get in
  store.set("k", "v");
}

TEST_CASE("a flood of idle connections cannot keep the job's clients out", "[token]") {
  ServerOptions options = withToken(60s);
  options.maxPendingHandshakes = 64;
  TestServer server(options);
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 200; ++i)
    idle.push_back(std::make_unique<RawClient>("127.0.0.1", server.port()));
  TcpStore store(clientWith(server, kSecret));
  store.set("k", "v");
  CHECK(store.get("k") == "v");
  CHECK(server.server().stats().connections <= 64 + 1);
}

TEST_CASE("fuzzed handshakes never crash the server and never get a store reply", "[token][fuzz]") {
  TestServer server(withToken(2s));
  std::mt19937 random(12345);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> length(0, 200);
  for (int round = 0; round < 300; ++round) {
    RawClient raw("127.0.0.1", server.port());
    std::string bytes;
    // Half of them start like a hello, so that the later stages see garbage too.
    if (round % 2 == 0) bytes = std::string(auth::kMagic);
    const int n = length(random);
    for (int i = 0; i < n; ++i) bytes.push_back(static_cast<char>(byte(random)));
    raw.send(bytes);
    if (bytes.size() >= auth::kClientHelloBytes && bytes.starts_with(auth::kMagic)) {
      // Got a challenge; whatever follows is a wrong proof, then garbage: closed, no more bytes.
      const auto challenge = raw.receive(auth::kServerChallengeBytes, 2s);
      CHECK(challenge);
      if (bytes.size() >= auth::kClientHelloBytes + auth::kClientProofBytes) {
        CHECK(closedWithoutReply(raw));
      }
    } else if (!auth::ServerHandshake::mayBeHello(bytes)) {
      CHECK(closedWithoutReply(raw));
    }
  }
  TcpStore store(clientWith(server, kSecret));
  store.set("alive", "yes");
  CHECK(store.get("alive") == "yes");
}

TEST_CASE("token-less clients work through the relay, waits and CANCEL_WAIT intact", "[relay]") {
  TestServer server(withToken());
  LoopbackRelay relay(RelayOptions{kSecret});
  relay.setUpstream("127.0.0.1", server.port());
  for (const auto dialect : {WireDialect::kTorch2, WireDialect::kTorch113}) {
    TcpStoreOptions options = server.clientOptions(dialect);
    options.port = relay.port();  // no secret: the relay proves it
    TcpStore worker(options);
    TcpStore other(options);
    worker.set("a", "1");
    CHECK(other.get("a") == "1");
    // A WAIT parked in the store is released by another client's SET through the relay.
    std::thread setter([&] {
      std::this_thread::sleep_for(100ms);
      other.set("late", "x");
    });
    worker.wait({"late"}, 5s);
    setter.join();
    // A timed-out WAIT: 2.x cancels it (CANCEL_WAIT) and keeps the connection; 1.13 reconnects.
    CHECK_THROWS_AS(worker.wait({"never"}, 200ms), StoreTimeoutError);
    worker.set("after", "ok");
    CHECK(worker.get("after") == "ok");
    CHECK(worker.deleteKey("a"));
    CHECK(worker.deleteKey("late"));
    CHECK(worker.deleteKey("after"));
  }
  CHECK(relay.stats().upstreamFailures == 0);
}

TEST_CASE("the relay to a store with another token closes the worker's connection", "[relay]") {
  ServerOptions options;
  options.secret = kOther;
  TestServer server(options);
  LogCapture log;
  LoopbackRelay relay(RelayOptions{kSecret});
  relay.setUpstream("127.0.0.1", server.port());
  RawClient worker("127.0.0.1", relay.port());
  worker.sendHex("0d 2a000000");
  CHECK(worker.closedWithin(3s));
  CHECK(eventually([&] { return log.text().find("holds a different one") != std::string::npos; },
                   3s, [&] { return log.text(); }));
  CHECK(relay.stats().upstreamFailures == 1);
}

TEST_CASE("the relay serves only its own user's processes", "[relay]") {
  if (::geteuid() != 0) {
    WARN("skipped: needs root to connect as another user");
    return;
  }
  TestServer server(withToken());
  LoopbackRelay relay(RelayOptions{kSecret});
  relay.setUpstream("127.0.0.1", server.port());
  // A child that becomes user nobody, connects to the relay and reports whether it was served.
  // The server and the relay run threads, so the child calls only async-signal-safe functions
  // (no allocation, no logging, no client library): a lock another thread held at fork() would
  // otherwise stay held in the child for ever. A relay that refuses closes the connection; one
  // that serves keeps it open.
  const std::uint16_t relayPort = relay.port();
  int report[2];
  REQUIRE(::pipe(report) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(report[0]);
    char served = 'x';
    if (::setgid(65534) == 0 && ::setuid(65534) == 0) {
      served = 'c';
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(relayPort);
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
        const unsigned char validate[] = {0x0d, 0x2a, 0x00, 0x00, 0x00};
        (void)!::write(fd, validate, sizeof validate);
        pollfd wait{fd, POLLIN, 0};
        char byte = 0;
        const int ready = ::poll(&wait, 1, 3000);
        served = ready == 0 ? 'y' : (::read(fd, &byte, 1) > 0 ? 'y' : 'n');
      }
    }
    (void)!::write(report[1], &served, 1);
    ::_exit(0);
  }
  ::close(report[1]);
  char served = '?';
  pollfd wait{report[0], POLLIN, 0};
  if (::poll(&wait, 1, 10000) == 1) (void)!::read(report[0], &served, 1);
  ::close(report[0]);
  if (served == '?') ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  INFO("the child reported '" << served
                              << "' (n: closed by the relay, y: served, c: no connection, "
                                 "x: could not become nobody, ?: no report in 10 s)");
  CHECK(served == 'n');
  CHECK(relay.stats().refusedUsers >= 1);
  // The relay's own user is served.
  TcpStoreOptions options = server.clientOptions();
  options.port = relay.port();
  TcpStore store(options);
  store.set("k", "v");
}
