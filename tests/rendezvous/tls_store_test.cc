// A store with TLS and a token, over real sockets: nothing readable crosses the wire, clients
// without TLS (torch's, a token client without it) get no reply byte, a store certificate the job
// does not trust or a store without TLS is told apart at once, the workers' relay carries its
// connections over TLS, and the TLS files are checked with one clear line each.
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "ddprun/rendezvous/errors.h"
#include "ddprun/rendezvous/loopback_relay.h"
#include "ddprun/rendezvous/tcp_store.h"
#include "ddprun/rendezvous/tls.h"
#include "log_capture.h"
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

// The job's TLS files in a directory of the test's own.
struct JobTls {
  TempDir dir;
  TestCertificate files = writeSelfSignedCertificate(dir.path, "store");
  std::shared_ptr<const TlsConfig> config =
      TlsConfig::load({files.certificate, files.privateKey, ""});
};

ServerOptions withTls(const std::shared_ptr<const TlsConfig>& tls,
                      std::chrono::milliseconds handshakeTimeout = 10s) {
  ServerOptions options;
  options.secret = kSecret;
  options.tls = tls;
  options.handshakeTimeout = handshakeTimeout;
  return options;
}

TcpStoreOptions client(std::uint16_t port, std::shared_ptr<const TlsConfig> tls) {
  TcpStoreOptions options;
  options.port = port;
  options.secret = kSecret;
  options.tls = std::move(tls);
  options.timeout = 10s;
  options.connectTimeout = 5s;
  return options;
}

// A forwarder that records every byte it carries, both ways: what an observer on the network sees.
class Tap {
 public:
  explicit Tap(std::uint16_t target) : target_(target) {
    listener_ = listenOnLoopback(port_);
    REQUIRE(listener_ >= 0);
    accepter_ = std::thread([this] { serve(); });
  }
  ~Tap() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    accepter_.join();
    {
      std::lock_guard lock(mutex_);
      for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& pump : pumps_) pump.join();
    for (int fd : open_) ::close(fd);
  }
  std::uint16_t port() const { return port_; }
  std::string seen() {
    std::lock_guard lock(mutex_);
    return seen_;
  }

 private:
  void serve() {
    for (;;) {
      const int in = ::accept(listener_, nullptr, nullptr);
      if (in < 0) return;
      const int out = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(target_);
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(out, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
        ::close(in);
        ::close(out);
        continue;
      }
      std::lock_guard lock(mutex_);
      open_.push_back(in);
      open_.push_back(out);
      pumps_.emplace_back([this, in, out] { copy(in, out); });
      pumps_.emplace_back([this, in, out] { copy(out, in); });
    }
  }
  void copy(int from, int to) {
    char buffer[16384];
    for (;;) {
      const ssize_t got = ::recv(from, buffer, sizeof buffer, 0);
      if (got <= 0) break;
      {
        std::lock_guard lock(mutex_);
        seen_.append(buffer, static_cast<std::size_t>(got));
      }
      if (::send(to, buffer, static_cast<std::size_t>(got), MSG_NOSIGNAL) != got) break;
    }
    ::shutdown(to, SHUT_RDWR);
  }

  std::uint16_t target_;
  std::uint16_t port_ = 0;
  int listener_ = -1;
  std::thread accepter_;
  std::mutex mutex_;
  std::vector<std::thread> pumps_;
  std::vector<int> open_;
  std::string seen_;
};

void exercise(TcpStore& store) {
  store.set("tls-secret-key-name", "tls-secret-value-bytes");
  CHECK(store.get("tls-secret-key-name") == "tls-secret-value-bytes");
  CHECK(store.add("tls-secret-counter", 5) == 5);
  store.wait({"tls-secret-key-name"}, 1s);
  CHECK_THROWS_AS(store.wait({"tls-secret-never"}, 200ms), StoreTimeoutError);
  CHECK(store.get("tls-secret-key-name") == "tls-secret-value-bytes");  // usable after a timeout
}

}  // namespace

TEST_CASE("with TLS every operation works and no key or value can be read on the wire", "[tls]") {
  JobTls tls;
  TestServer server(withTls(tls.config));
  {
    Tap tap(server.port());
    TcpStore store(client(tap.port(), tls.config));
    exercise(store);
    const std::string seen = tap.seen();
    CHECK(seen.size() > 500);  // the handshakes and the requests went through the tap
    CHECK(seen.find("tls-secret") == std::string::npos);
    CHECK(seen.find("ddpAUTH1") == std::string::npos);  // even the token hello is inside TLS
  }
  // The same through a store without TLS: the tap does see the names (so it would have above).
  ServerOptions tokenOnly;
  tokenOnly.secret = kSecret;
  TestServer plain(tokenOnly);
  Tap tap(plain.port());
  TcpStore store(client(tap.port(), nullptr));
  exercise(store);
  CHECK(tap.seen().find("tls-secret-key-name") != std::string::npos);
}

TEST_CASE(
    "a server given TLS without the token, or a TLS config without its key, is refused at "
    "construction",
    "[tls]") {
  JobTls tls;
  ServerOptions noToken = withTls(tls.config);
  noToken.secret.reset();
  noToken.port = 0;
  try {
    RendezvousServer server(noToken);
    FAIL("a TLS store without a token was built: it would admit anyone");
  } catch (const ServerError& error) {
    CHECK_THAT(error.what(), Catch::Contains("without the job's token"));
  }
  ServerOptions clientOnly = withTls(TlsConfig::load({tls.files.certificate, "", ""}));
  clientOnly.port = 0;
  CHECK_THROWS_AS(RendezvousServer(clientOnly), ServerError);
}

TEST_CASE("a client without TLS gets no reply byte, and the refusal is logged once", "[tls]") {
  JobTls tls;
  LogCapture log;
  TestServer server(withTls(tls.config));
  for (int i = 0; i < 3; ++i) {
    RawClient torch("127.0.0.1", server.port());
    torch.sendHex("00cef7853c 0d 01020304");  // torch 2.x's VALIDATE and PING
    CHECK(!torch.receive(1, 2s));
    CHECK(torch.closedWithin(1s));
  }
  // A ddprun client with the token but no TLS: its token hello is no TLS hello either. It asks
  // whether a TLS store is there (store_handshake.h) and says so.
  TcpStoreOptions noTls = client(server.port(), nullptr);
  try {
    TcpStore store(noTls);
    FAIL("connected without TLS");
  } catch (const StoreAuthError& error) {
    CHECK(error.code() == StoreAuthError::Code::kTlsRequired);
    CHECK_THAT(error.what(), Catch::Contains("the store serves TLS"));
    CHECK_THAT(error.what(), Catch::Contains("tls_cert=PATH"));
  }
  CHECK(eventually([&] { return server.server().stats().refusedHandshakes >= 4; }, 3s,
                   [&] { return log.text(); }));
  const std::string text = log.text();
  CHECK_THAT(text, Catch::Contains("did not complete a TLS handshake"));
  // One line per peer address and reason per minute (rendezvous/src/refusal_tally.h): the four
  // clients without TLS share one (the ddprun client's TLS probe, which leaves the token handshake
  // after the challenge, may add its own by now).
  std::size_t lines = 0;
  for (auto at = text.find("did not complete a TLS handshake"); at != std::string::npos;
       at = text.find("did not complete a TLS handshake", at + 1)) {
    ++lines;
  }
  CHECK(lines == 1);
  CHECK(eventually(
      [&] { return server.server().stats().connections == 0; }, 2s,
      [&] { return fmt::format("{} connections", server.server().stats().connections); }));
}

TEST_CASE("a TLS client tells a store without TLS and a certificate it does not trust at once",
          "[tls]") {
  JobTls tls;
  ServerOptions tokenOnly;
  tokenOnly.secret = kSecret;
  TestServer plain(tokenOnly);
  const auto started = std::chrono::steady_clock::now();
  try {
    TcpStore store(client(plain.port(), tls.config));
    FAIL("connected to a store without TLS");
  } catch (const StoreAuthError& error) {
    CHECK(error.code() == StoreAuthError::Code::kNoTls);
    CHECK_THAT(error.what(), Catch::Contains("tls_cert"));
  }
  // Another job's certificate: refused at the first attempt, not retried.
  TempDir otherDir;
  const TestCertificate other = writeSelfSignedCertificate(otherDir.path, "other");
  TestServer stranger(withTls(TlsConfig::load({other.certificate, other.privateKey, ""})));
  try {
    TcpStore store(client(stranger.port(), tls.config));
    FAIL("trusted another job's certificate");
  } catch (const StoreAuthError& error) {
    CHECK(error.code() == StoreAuthError::Code::kUntrustedCertificate);
    CHECK_THAT(error.what(), Catch::Contains("not one the job trusts"));
  }
  CHECK(std::chrono::steady_clock::now() - started < 3s);
  // A CA file given apart from the certificate is what a client checks by.
  const auto byAuthority =
      TlsConfig::load({other.certificate, other.privateKey, tls.files.certificate});
  TestServer job(withTls(tls.config));
  TcpStore store(client(job.port(), byAuthority));
  store.set("k", "v");
  CHECK(store.get("k") == "v");
}

TEST_CASE("a connection that stays silent in the TLS handshake is closed at the deadline",
          "[tls]") {
  JobTls tls;
  TestServer server(withTls(tls.config, 300ms));
  RawClient idle("127.0.0.1", server.port());
  CHECK(idle.closedWithin(3s));
  CHECK(eventually(
      [&] { return server.server().stats().connections == 0; }, 2s,
      [&] { return fmt::format("{} connections", server.server().stats().connections); }));
  // The job's clients still get through.
  TcpStore store(client(server.port(), tls.config));
  store.set("k", "v");
  CHECK(store.get("k") == "v");
}

TEST_CASE("connections waiting in the TLS handshake beyond the limit evict the oldest", "[tls]") {
  JobTls tls;
  ServerOptions options = withTls(tls.config);
  options.maxPendingHandshakes = 4;
  TestServer server(options);
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 6; ++i) {
    idle.push_back(std::make_unique<RawClient>("127.0.0.1", server.port()));
    std::this_thread::sleep_for(20ms);  // accepted in this order
  }
  CHECK(idle[0]->closedWithin(2s));
  CHECK(idle[1]->closedWithin(2s));
  CHECK(idle[5]->silentFor(200ms));
  TcpStore store(client(server.port(), tls.config));
  store.set("k", "v");
  CHECK(store.get("k") == "v");
}

TEST_CASE("random bytes at a TLS store never crash it", "[tls][fuzz]") {
  JobTls tls;
  TestServer server(withTls(tls.config, 1s));
  std::mt19937 random(12345);
  for (int i = 0; i < 100; ++i) {
    RawClient raw("127.0.0.1", server.port());
    std::string bytes(1 + random() % 600, '\0');
    for (char& byte : bytes) byte = static_cast<char>(random());
    if (i % 3 == 0) bytes[0] = 0x16;  // a TLS handshake record's type, then garbage
    raw.send(bytes);
    CHECK(raw.closedWithin(3s));
  }
  TcpStore store(client(server.port(), tls.config));
  store.set("k", "v");
  CHECK(store.get("k") == "v");
}

TEST_CASE("the workers' relay carries their connections to a TLS store", "[tls][relay]") {
  JobTls tls;
  TestServer server(withTls(tls.config));
  RelayOptions options{kSecret};
  options.tls = tls.config;
  LoopbackRelay relay(options);
  relay.setUpstream("127.0.0.1", server.port());
  TcpStoreOptions worker;  // an unmodified worker: no token, no TLS
  worker.port = relay.port();
  worker.timeout = 10s;
  worker.connectTimeout = 5s;
  TcpStore store(worker);
  exercise(store);
  // One with the wrong certificate: the worker's connection is closed and the relay says why.
  TempDir otherDir;
  const TestCertificate other = writeSelfSignedCertificate(otherDir.path, "other");
  LogCapture log;
  RelayOptions wrong{kSecret};
  wrong.tls = TlsConfig::load({other.certificate, other.privateKey, ""});
  LoopbackRelay untrusting(wrong);
  untrusting.setUpstream("127.0.0.1", server.port());
  RawClient raw("127.0.0.1", untrusting.port());
  raw.sendHex("00cef7853c 0d 01020304");
  CHECK(raw.closedWithin(3s));
  CHECK(eventually([&] { return log.text().find("not one the job trusts") != std::string::npos; },
                   3s, [&] { return log.text(); }));
}

TEST_CASE("TLS files that cannot be used are one line naming the file and the fix", "[tls]") {
  TempDir dir;
  const TestCertificate mine = writeSelfSignedCertificate(dir.path, "mine");
  const TestCertificate other = writeSelfSignedCertificate(dir.path, "other");
  const auto refused = [](const TlsFiles& files) {
    try {
      TlsConfig::load(files);
    } catch (const TlsError& error) {
      return std::string(error.what());
    }
    return std::string("loaded");
  };
  CHECK_THAT(refused({dir.path + "/none.crt", mine.privateKey, ""}),
             Catch::Contains("cannot read the TLS certificate " + dir.path + "/none.crt"));
  CHECK_THAT(refused({mine.certificate, other.privateKey, ""}),
             Catch::Contains("does not belong to the certificate"));
  ::chmod(mine.privateKey.c_str(), 0644);
  CHECK_THAT(refused({mine.certificate, mine.privateKey, ""}),
             Catch::Contains(fmt::format("run `chmod 600 {}`", mine.privateKey)));
  ::chmod(mine.privateKey.c_str(), 0600);
  std::ofstream(dir.path + "/text.crt") << "not a certificate\n";
  CHECK_THAT(refused({dir.path + "/text.crt", "", ""}),
             Catch::Contains("holds no PEM certificate"));
  CHECK_THAT(refused({"", mine.privateKey, ""}), Catch::Contains("without its certificate"));
  CHECK(refused({mine.certificate, mine.privateKey, ""}) == "loaded");
  CHECK(refused({mine.certificate, "", ""}) == "loaded");  // a client only
}
