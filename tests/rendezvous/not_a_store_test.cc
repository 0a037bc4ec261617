// TcpStore against an address where something answers that is not a store (an HTTP server, an
// SSH server, a TLS service, one that says nothing, one that hangs up): it names what answers,
// as a StoreHandshakeError whose peer() says it, at once, without a token, with one and with TLS,
// instead of guessing that a store wants a token. And against ddprun stores of other settings
// (a token this client lacks, no token, a full store): a StoreAuthError saying which, or the
// peer that closes at once. Loopback only; every wait is bounded and says what it saw.
#include <fmt/format.h>
#include <openssl/ssl.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <optional>

#include "ddprun/rendezvous/errors.h"
#include "ddprun/rendezvous/tcp_store.h"
#include "ddprun/rendezvous/tls.h"
#include "fake_peer.h"
#include "raw_client.h"
#include "temp_dir.h"
#include "test_certificate.h"
#include "test_secrets.h"
#include "test_server.h"

using namespace ddprun::rendezvous;
using namespace ddprun::test;
using namespace std::chrono_literals;
using Peer = StoreHandshakeError::Peer;
using Clock = std::chrono::steady_clock;

namespace {

std::string_view peerName(Peer peer) {
  switch (peer) {
    case Peer::kStore:
      return "kStore";
    case Peer::kHttpServer:
      return "kHttpServer";
    case Peer::kSshServer:
      return "kSshServer";
    case Peer::kTlsServer:
      return "kTlsServer";
    case Peer::kOtherBytes:
      return "kOtherBytes";
    case Peer::kSilent:
      return "kSilent";
    case Peer::kClosesAtOnce:
      return "kClosesAtOnce";
  }
  return "?";
}

// The job's TLS files, in a directory of the test's own.
struct JobTls {
  TempDir dir;
  TestCertificate files = writeSelfSignedCertificate(dir.path, "job");
  std::shared_ptr<const TlsConfig> config =
      TlsConfig::load({files.certificate, files.privateKey, ""});
};

enum class Client { kPlain, kToken, kTls };

std::string_view clientName(Client client) {
  switch (client) {
    case Client::kPlain:
      return "a client without a token";
    case Client::kToken:
      return "a client with a token";
    case Client::kTls:
      return "a client with a token and TLS";
  }
  return "?";
}

TcpStoreOptions clientOf(Client client, std::uint16_t port, const JobTls& tls) {
  TcpStoreOptions options;
  options.port = port;
  options.timeout = 2s;
  // Longer than any answer below may take: what ends connecting is the answer, not the timeout.
  options.connectTimeout = 5s;
  if (client != Client::kPlain) options.secret = kSecret;
  if (client == Client::kTls) options.tls = tls.config;
  return options;
}

// What connecting ended with: the error, its type and code, and how long it took.
struct Outcome {
  bool connected = false;
  bool handshakeError = false;
  bool authError = false;
  Peer peer = Peer::kStore;
  std::optional<StoreAuthError::Code> code;
  std::string message;
  std::chrono::milliseconds took{0};

  std::string describe() const {
    return fmt::format("after {} ms: {}{}: {}", took.count(),
                       connected        ? "connected"
                       : authError      ? "StoreAuthError"
                       : handshakeError ? "StoreHandshakeError"
                                        : "another error",
                       handshakeError ? fmt::format(" (peer {})", peerName(peer)) : "", message);
  }
};

Outcome connectTo(const TcpStoreOptions& options) {
  Outcome outcome;
  const auto started = Clock::now();
  try {
    TcpStore store(options);
    outcome.connected = true;
  } catch (const StoreAuthError& error) {
    outcome.handshakeError = outcome.authError = true;
    outcome.peer = error.peer();
    outcome.code = error.code();
    outcome.message = error.what();
  } catch (const StoreHandshakeError& error) {
    outcome.handshakeError = true;
    outcome.peer = error.peer();
    outcome.message = error.what();
  } catch (const std::exception& error) {
    outcome.message = error.what();
  }
  outcome.took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
  return outcome;
}

// A TLS service that is no store: it completes a TLS handshake with a certificate of its own and
// then answers nothing a store would.
FakePeer::Serve tlsService(const std::shared_ptr<const TlsConfig>& tls) {
  return [tls](int fd, const std::atomic<bool>& stopping) {
    const timeval bound{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
    SSL* ssl = ::SSL_new(tls->serverContext());
    ::SSL_set_fd(ssl, fd);
    if (::SSL_accept(ssl) == 1) {
      const std::string_view greeting = "220 not a store\r\n";
      ::SSL_write(ssl, greeting.data(), static_cast<int>(greeting.size()));
      char sink[256];
      while (!stopping && ::SSL_read(ssl, sink, sizeof sink) > 0) {
      }
    }
    ::SSL_free(ssl);
  };
}

}  // namespace

TEST_CASE(
    "a client names what answers when it is no store (HTTP, SSH, silence, a hang-up, other "
    "bytes), without a token, with one and with TLS",
    "[not-a-store]") {
  struct Case {
    FakePeer::Kind kind;
    Peer peer;
    std::string says;
  };
  const Case which =
      GENERATE(Case{FakePeer::Kind::kHttp, Peer::kHttpServer, "it looks like an HTTP server"},
               Case{FakePeer::Kind::kHttp09, Peer::kHttpServer, "it looks like an HTTP server"},
               Case{FakePeer::Kind::kSsh, Peer::kSshServer,
                    "it looks like an SSH server (it answered 'SSH-2.0-OpenSSH_9.2')"},
               Case{FakePeer::Kind::kSilent, Peer::kSilent, "answers nothing"},
               Case{FakePeer::Kind::kClose, Peer::kClosesAtOnce, "closes them without a byte"},
               Case{FakePeer::Kind::kBinary, Peer::kOtherBytes, "bytes no store sends"});
  const Client client = GENERATE(Client::kPlain, Client::kToken, Client::kTls);
  JobTls tls;
  FakePeer peer(which.kind);
  TcpStoreOptions options = clientOf(client, peer.port(), tls);
  // Silence (and an HTTP server's, until a line end) is told when the attempt's wait ends: give it
  // the second the agent gives its first connection (membership.cc).
  const bool silentAtFirst = which.kind == FakePeer::Kind::kSilent ||
                             which.kind == FakePeer::Kind::kHttp ||
                             which.kind == FakePeer::Kind::kHttp09;
  if (silentAtFirst) options.connectTimeout = 1s;
  const Outcome outcome = connectTo(options);
  INFO(clientName(client) << ", " << outcome.describe() << "; " << peer.describe());
  REQUIRE(outcome.handshakeError);
  CHECK_FALSE(outcome.authError);  // never guessed to be a store that wants a token (or TLS)
  CHECK(outcome.peer == which.peer);
  CHECK_THAT(outcome.message,
             Catch::Contains("something answers there but is not a ddprun/TCPStore store"));
  CHECK_THAT(outcome.message, Catch::Contains(which.says));
  CHECK_THAT(outcome.message, !Catch::Contains("token_file"));
  CHECK(outcome.message.find('\n') == std::string::npos);
  // The peer's bytes are shown escaped: no terminal escape reaches a log.
  CHECK(outcome.message.find('\x1b') == std::string::npos);
  if (which.kind == FakePeer::Kind::kBinary)
    CHECK_THAT(outcome.message, Catch::Contains("\\x1b[31mBOO"));
  // At once: no retrying until the connect timeout (5 s). Silence costs the attempt's wait (1 s)
  // and at most a second for the line end; everything else a few round trips (the bounds leave
  // room for a busy machine).
  CHECK(outcome.took < (silentAtFirst ? 4000ms : 2500ms));
}

TEST_CASE("a TLS service that is no store is named as one by a client without TLS",
          "[not-a-store]") {
  TempDir dir;
  const TestCertificate own = writeSelfSignedCertificate(dir.path, "service");
  FakePeer service(tlsService(TlsConfig::load({own.certificate, own.privateKey, ""})));
  JobTls tls;
  for (const Client client : {Client::kPlain, Client::kToken}) {
    const Outcome outcome = connectTo(clientOf(client, service.port(), tls));
    INFO(clientName(client) << ", " << outcome.describe() << "; " << service.describe());
    REQUIRE(outcome.handshakeError);
    CHECK_FALSE(outcome.authError);
    CHECK(outcome.peer == Peer::kTlsServer);
    CHECK_THAT(outcome.message, Catch::Contains("it speaks TLS"));
    CHECK(outcome.took < 2500ms);
  }
  // With the job's TLS, its certificate is the one it is told by.
  const Outcome outcome = connectTo(clientOf(Client::kTls, service.port(), tls));
  INFO(outcome.describe());
  REQUIRE(outcome.authError);
  CHECK(outcome.code == StoreAuthError::Code::kUntrustedCertificate);
}

TEST_CASE(
    "ddprun stores of other settings are told apart: a token this client lacks, no token, "
    "a full store",
    "[not-a-store]") {
  JobTls tls;
  SECTION("a store with a token, a client without: kTokenRequired, naming token_file") {
    ServerOptions options;
    options.secret = kSecret;
    TestServer server(options);
    const Outcome outcome = connectTo(clientOf(Client::kPlain, server.port(), tls));
    INFO(outcome.describe());
    REQUIRE(outcome.authError);
    CHECK(outcome.code == StoreAuthError::Code::kTokenRequired);
    CHECK_THAT(outcome.message, Catch::Contains("requires the job's token"));
    CHECK_THAT(outcome.message, Catch::Contains("token_file"));
    CHECK(outcome.took < 2500ms);
  }
  SECTION("a store without a token, a client with one: kNoToken") {
    TestServer server;
    const Outcome outcome = connectTo(clientOf(Client::kToken, server.port(), tls));
    INFO(outcome.describe());
    REQUIRE(outcome.authError);
    CHECK(outcome.code == StoreAuthError::Code::kNoToken);
    CHECK_THAT(outcome.message, Catch::Contains("runs without a token"));
    CHECK(outcome.took < 2500ms);
  }
  SECTION("a store at its connection limit closes at once, and the line says that is a reason") {
    ServerOptions options;
    options.maxConnections = 1;
    TestServer server(options);
    RawClient holder("127.0.0.1", server.port());
    holder.handshake2x();
    const Outcome outcome = connectTo(clientOf(Client::kPlain, server.port(), tls));
    INFO(outcome.describe());
    REQUIRE(outcome.handshakeError);
    CHECK(outcome.peer == Peer::kClosesAtOnce);
    CHECK_THAT(outcome.message, Catch::Contains("connection limit"));
  }
}
