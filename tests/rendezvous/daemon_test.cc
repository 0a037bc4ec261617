// ddprun-rendezvous as users run it: the real binary, its output, its signals and its errors.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "ddprun/rendezvous/errors.h"
#include "ddprun/rendezvous/tcp_store.h"
#include "lines.h"
#include "subprocess.h"
#include "temp_dir.h"
#include "test_certificate.h"
#include "waits.h"

using namespace ddprun::rendezvous;
using ddprun::test::exitsWith;
using ddprun::test::lines;
using ddprun::test::Subprocess;
using namespace std::chrono_literals;

namespace {

// Starts the daemon with `args` and returns it once it printed its listening line.
std::unique_ptr<Subprocess> startDaemon(std::vector<std::string> args, int& port) {
  args.insert(args.begin(), DDPRUN_RENDEZVOUS_BIN);
  auto daemon = std::make_unique<Subprocess>(args);
  port = ddprun::test::listeningPort(*daemon, 10s);
  REQUIRE(port > 0);
  return daemon;
}

bool tcpConnects(const char* address, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in target{};
  target.sin_family = AF_INET;
  target.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, address, &target.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&target), sizeof target) == 0;
  ::close(fd);
  return ok;
}

// Runs the daemon expecting it to refuse to start; returns (exit status, stderr).
std::pair<int, std::string> refusedStart(std::vector<std::string> args) {
  args.insert(args.begin(), DDPRUN_RENDEZVOUS_BIN);
  Subprocess daemon(args);
  const auto status = ddprun::test::exitStatus(daemon, 10s);
  REQUIRE(status.has_value());
  return {*status, daemon.errors()};
}

}  // namespace

TEST_CASE("with port 0 it prints the port it got, serves it, and SIGTERM stops it cleanly",
          "[daemon]") {
  int port = 0;
  auto daemon = startDaemon({"--port", "0"}, port);
  TcpStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  {
    TcpStore store(options);
    store.set("k", "v");
    CHECK(store.get("k") == "v");
    const int signal = GENERATE(SIGTERM, SIGINT);
    daemon->signal(signal);
    CHECK(exitsWith(*daemon, 0, 10s));
    CHECK_THAT(daemon->errors(),
               Catch::Contains(signal == SIGTERM ? "received SIGTERM, shutting down"
                                                 : "received SIGINT, shutting down"));
  }
  CHECK_FALSE(tcpConnects("127.0.0.1", port));
}

TEST_CASE("it listens only on the address it is given", "[daemon]") {
  int port = 0;
  auto daemon = startDaemon({"--host", "127.0.0.1", "--port", "0"}, port);
  CHECK(tcpConnects("127.0.0.1", port));
  // 127.0.0.2 is this host too (all of 127/8 is loopback): a server bound to every interface,
  // as torch's is, would answer there.
  CHECK_FALSE(tcpConnects("127.0.0.2", port));
  std::ifstream table("/proc/net/tcp");
  std::stringstream text;
  text << table.rdbuf();
  CHECK_THAT(text.str(), Catch::Contains(fmt::format("0100007F:{:04X} 00000000:0000 0A", port)));
  CHECK_THAT(text.str(), !Catch::Contains(fmt::format("00000000:{:04X} 00000000:0000 0A", port)));
  daemon->signal(SIGTERM);
  CHECK(exitsWith(*daemon, 0, 10s));
}

TEST_CASE("a port in use is one clear line and exit code 2", "[daemon]") {
  int port = 0;
  auto first = startDaemon({"--port", "0"}, port);
  const auto [status, errors] = refusedStart({"--port", std::to_string(port)});
  CHECK(status == 2);
  CHECK(lines(errors).size() == 1);
  CHECK_THAT(errors, Catch::Contains(fmt::format("cannot listen on 127.0.0.1:{}", port)));
  CHECK_THAT(errors, Catch::Contains("already in use"));
  CHECK_THAT(errors, Catch::Contains("port 0"));
  first->signal(SIGTERM);
  CHECK(exitsWith(*first, 0, 10s));
}

TEST_CASE("bad addresses and arguments are one clear line and exit code 2", "[daemon]") {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const Case which = GENERATE(
      Case{{"--host", "192.0.2.55", "--port", "0"},
           "no network interface of this host has that address"},
      Case{{"--host", "no-such-host.invalid"}, "cannot resolve host 'no-such-host.invalid'"},
      Case{{"--port", "70000"}, "--port 70000 is not in 0..65535"},
      Case{{"--port", "http"}, "the argument ('http') for option '--port' is invalid"},
      Case{{"--log-level", "loud"}, "--log-level 'loud' is not one of"},
      Case{{"--max-connections", "0"}, "--max-connections 0 must be at least 1"},
      Case{{"--max-connections", "-1"}, "--max-connections -1 must be at least 1"},
      Case{{"--max-value-bytes", "-1"}, "--max-value-bytes -1 must be at least 1"},
      Case{{"--max-pending-handshakes", "-5"}, "--max-pending-handshakes -5 must be at least 1"},
      Case{{"--tls-cert", "/nonexistent.crt", "--tls-key", "/nonexistent.key"},
           "TLS needs the job's token too; add --token-file FILE"},
      // The combination is checked before any file is read.
      Case{{"--token-file", "/nonexistent.token", "--tls-cert", "/nonexistent.crt"},
           "give both --tls-cert FILE and --tls-key FILE"},
      Case{{"--token-file", ""}, "--token-file '' names no file"},
      Case{{"--handshake-timeout", "0.0001"},
           "--handshake-timeout must be a positive number of seconds"},
      Case{{"--bogus"}, "unrecognised option '--bogus'"},
      Case{{"29401"}, "unexpected argument '29401'; give the port as --port 29401"},
      Case{{"--port", "0", "extra"}, "unexpected argument 'extra'"},
      Case{{"--partial-request-timeout", "-1"}, "must be a positive number of seconds"},
      Case{{"--max-stored-bytes", "1000"},
           "--max-stored-bytes 1000 is less than --max-value-bytes 8388608: give at least 8388608"},
      Case{{"--max-pending-reply-bytes", "0"},
           "--max-pending-reply-bytes 0 is less than --max-value-bytes 8388608: give at least"},
      Case{{"--max-stored-bytes", "-1"}, "--max-stored-bytes -1 is less than --max-value-bytes"});
  INFO(fmt::format("{}", fmt::join(which.args, " ")));
  const auto [status, errors] = refusedStart(which.args);
  CHECK(status == 2);
  CHECK(lines(errors).size() == 1);
  CHECK_THAT(errors, Catch::StartsWith("ddprun-rendezvous: error: "));
  CHECK_THAT(errors, Catch::Contains(which.says));
}

TEST_CASE("help and version exit 0", "[daemon]") {
  Subprocess help({DDPRUN_RENDEZVOUS_BIN, "--help"});
  CHECK(exitsWith(help, 0, 10s));
  CHECK_THAT(help.output(), Catch::Contains("--max-connections"));
  CHECK_THAT(help.output(), Catch::Contains("--max-stored-bytes"));
  CHECK_THAT(help.output(), Catch::Contains("--max-pending-reply-bytes"));
  Subprocess version({DDPRUN_RENDEZVOUS_BIN, "--version"});
  CHECK(exitsWith(version, 0, 10s));
  CHECK_THAT(version.output(), Catch::StartsWith("ddprun-rendezvous "));
}

TEST_CASE("the budgets given on the command line hold", "[daemon]") {
  int port = 0;
  auto daemon = startDaemon(
      {"--port", "0", "--max-stored-bytes", "10000000", "--max-value-bytes", "4000000"}, port);
  TcpStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  TcpStore store(options);
  store.set("a", std::string(4000000, 'a'));
  store.set("b", std::string(4000000, 'b'));
  CHECK(store.check({"a", "b"}));
  {
    TcpStore writer(options);
    writer.set("c",
               std::string(4000000, 'c'));  // no reply: the refusal shows as a closed connection
    CHECK_THROWS(writer.get("c"));
  }
  CHECK(
      daemon->waitForError("over the 10000000-byte budget (ddprun-rendezvous --max-stored-bytes "
                           "sets it)",
                           10s));
  CHECK(store.numKeys() == 2);
  daemon->signal(SIGTERM);
  CHECK(exitsWith(*daemon, 0, 10s));
}

TEST_CASE(
    "with a token and TLS files it serves TLS clients only, and a key others can read is "
    "one line and exit 2",
    "[daemon][tls]") {
  ddprun::test::TempDir dir;
  const auto files = ddprun::test::writeSelfSignedCertificate(dir.path, "store");
  const std::string token = dir.path + "/token";
  std::ofstream(token) << "0123456789abcdef-the-job-secret\n";
  ::chmod(token.c_str(), 0600);
  int port = 0;
  auto daemon = startDaemon({"--port", "0", "--token-file", token, "--tls-cert", files.certificate,
                             "--tls-key", files.privateKey},
                            port);
  TcpStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.connectTimeout = 5s;
  options.secret = readTokenFile(token);
  options.tls = TlsConfig::load({files.certificate, "", ""});
  {
    TcpStore store(options);
    store.set("k", "v");
    CHECK(store.get("k") == "v");
  }
  options.tls = nullptr;  // the token alone is not enough
  CHECK_THROWS_AS(TcpStore(options), StoreAuthError);
  daemon->signal(SIGTERM);
  CHECK(exitsWith(*daemon, 0, 10s));
  CHECK_THAT(daemon->errors(), Catch::Contains("TLS, and clients must prove the job's token"));

  ::chmod(files.privateKey.c_str(), 0640);
  const auto [status, errors] = refusedStart({"--port", "0", "--token-file", token, "--tls-cert",
                                              files.certificate, "--tls-key", files.privateKey});
  CHECK(status == 2);
  CHECK(lines(errors).size() == 1);
  CHECK_THAT(errors, Catch::Contains(fmt::format("run `chmod 600 {}`", files.privateKey)));
}
