// The one copy of the token/TLS rules, the loader, the store's security note and open warning
// (security_options.h), and the range check of a server's limits (server_limits.h): each rule in
// the agent's and the daemon's spelling, each bad input one line naming the fix.
#include "ddprun/rendezvous/security_options.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <climits>

#include "ddprun/rendezvous/server_limits.h"
#include "temp_dir.h"
#include "test_certificate.h"

using namespace ddprun::rendezvous;
using ddprun::test::TempDir;

namespace {

JobSecurityFiles files(std::string token, std::string cert, std::string key, std::string ca = "") {
  return JobSecurityFiles{std::move(token),
                          TlsFiles{std::move(cert), std::move(key), std::move(ca)}};
}

std::string problem(const JobSecurityFiles& given, const SecurityOptionNames& names) {
  return securityOptionsProblem(given, names).value_or("<none>");
}

bool oneLine(const std::string& text) { return text.find('\n') == std::string::npos; }

std::string writeToken(const std::string& dir, mode_t mode) {
  return ddprun::test::writeFile(dir + "/token", "0123456789abcdef-the-job-secret\n", mode);
}

// What loadJobSecurity throws, or FAIL.
JobSecurityError loadError(const JobSecurityFiles& given, const SecurityOptionNames& names) {
  try {
    loadJobSecurity(given, names);
  } catch (const JobSecurityError& error) {
    return error;
  }
  FAIL("loaded");
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("security options: no TLS, or TLS with the token and both files, is fine", "[security]") {
  for (const SecurityOptionNames* names : {&kAgentSecurityOptions, &kDaemonSecurityOptions}) {
    CHECK_FALSE(securityOptionsProblem(files("", "", ""), *names));
    CHECK_FALSE(securityOptionsProblem(files("/t", "", ""), *names));
    CHECK_FALSE(securityOptionsProblem(files("/t", "/c.pem", "/k.pem"), *names));
    CHECK_FALSE(securityOptionsProblem(files("/t", "/c.pem", "/k.pem", "/ca.pem"), *names));
  }
}

TEST_CASE("security options: TLS needs the token, named in the caller's spelling", "[security]") {
  CHECK(problem(files("", "/c.pem", "/k.pem"), kAgentSecurityOptions) ==
        "TLS needs the job's token too; add token_file=PATH");
  CHECK(problem(files("", "/c.pem", "/k.pem"), kDaemonSecurityOptions) ==
        "TLS needs the job's token too; add --token-file FILE");
  // Any TLS file alone counts as TLS asked for.
  CHECK(problem(files("", "", "/k.pem"), kDaemonSecurityOptions) ==
        "TLS needs the job's token too; add --token-file FILE");
  CHECK(problem(files("", "", "", "/ca.pem"), kAgentSecurityOptions) ==
        "TLS needs the job's token too; add token_file=PATH");
}

TEST_CASE(
    "security options: the certificate and its key go together, for every agent and for the "
    "daemon",
    "[security]") {
  const std::string agent =
      "give every agent both tls_cert=PATH and tls_key=PATH (any agent may host the workers' "
      "store)";
  CHECK(problem(files("/t", "/c.pem", ""), kAgentSecurityOptions) == agent);
  CHECK(problem(files("/t", "", "/k.pem"), kAgentSecurityOptions) == agent);
  // A CA alone would do for a client, but every agent may host a store.
  CHECK(problem(files("/t", "", "", "/ca.pem"), kAgentSecurityOptions) == agent);
  CHECK(problem(files("/t", "", "/k.pem"), kDaemonSecurityOptions) ==
        "give both --tls-cert FILE and --tls-key FILE (the store presents the certificate and "
        "proves it with the key)");
  CHECK(oneLine(problem(files("/t", "/c.pem", ""), kDaemonSecurityOptions)));
}

TEST_CASE(
    "loadJobSecurity: the secret and the TLS contexts together, or one typed error naming the "
    "file",
    "[security]") {
  TempDir dir;
  const std::string token = writeToken(dir.path, 0600);
  const auto cert = ddprun::test::writeSelfSignedCertificate(dir.path, "store");

  SECTION("nothing given: an open store, nothing read") {
    const JobSecurity open = loadJobSecurity(files("", "", ""), kDaemonSecurityOptions);
    CHECK_FALSE(open.secret);
    CHECK(open.tls == nullptr);
  }
  SECTION("the token alone") {
    const JobSecurity tokenOnly = loadJobSecurity(files(token, "", ""), kAgentSecurityOptions);
    REQUIRE(tokenOnly.secret);
    CHECK(tokenOnly.secret->bytes() == "0123456789abcdef-the-job-secret");
    CHECK(tokenOnly.tls == nullptr);
  }
  SECTION("the token and TLS: a context that can serve") {
    const JobSecurity both =
        loadJobSecurity(files(token, cert.certificate, cert.privateKey), kDaemonSecurityOptions);
    REQUIRE(both.secret);
    REQUIRE(both.tls != nullptr);
    CHECK(both.tls->canServe());
  }
  SECTION("a bad combination is refused before any file is read") {
    const JobSecurityError error =
        loadError(files("/nonexistent", "/c.pem", ""), kAgentSecurityOptions);
    CHECK(error.code() == JobSecurityError::Code::kCombination);
    CHECK_THAT(error.what(), Catch::Contains("both tls_cert=PATH and tls_key=PATH"));
  }
  SECTION("a token others can read") {
    ::chmod(token.c_str(), 0644);
    const JobSecurityError error = loadError(files(token, "", ""), kDaemonSecurityOptions);
    CHECK(error.code() == JobSecurityError::Code::kTokenFile);
    CHECK_THAT(error.what(), Catch::Contains("run `chmod 600 " + token + "`"));
    CHECK(oneLine(error.what()));
  }
  SECTION("a missing TLS key") {
    const JobSecurityError error = loadError(
        files(token, cert.certificate, dir.path + "/missing.key"), kDaemonSecurityOptions);
    CHECK(error.code() == JobSecurityError::Code::kTlsFiles);
    CHECK_THAT(error.what(), Catch::Contains(dir.path + "/missing.key"));
    CHECK(oneLine(error.what()));
  }
}

TEST_CASE("the store's security note and its open warning", "[security]") {
  TempDir dir;
  JobSecurity open;
  JobSecurity token;
  token.secret = JobSecret::fromBytes("0123456789abcdef-the-job-secret");
  const auto cert = ddprun::test::writeSelfSignedCertificate(dir.path, "store");
  JobSecurity tls = token;
  tls.tls = TlsConfig::load({cert.certificate, cert.privateKey, ""});

  CHECK(storeSecurityNote(open).empty());
  CHECK(storeSecurityNote(token) == "; clients must prove the job's token");
  CHECK(storeSecurityNote(tls) == "; TLS, and clients must prove the job's token");

  // Only an open store that other hosts reach is warned about.
  CHECK_FALSE(openStoreWarning("the rendezvous store", "0.0.0.0", "0.0.0.0:1", token,
                               kAgentSecurityOptions));
  CHECK_FALSE(openStoreWarning("the rendezvous store", "127.0.0.1", "127.0.0.1:1", open,
                               kAgentSecurityOptions));
  CHECK_FALSE(openStoreWarning("the rendezvous store", "localhost", "localhost:1", open,
                               kDaemonSecurityOptions));
  CHECK_FALSE(
      openStoreWarning("the rendezvous store", "::1", "[::1]:1", open, kDaemonSecurityOptions));
  CHECK(
      openStoreWarning("the workers' store", "10.0.0.1", "10.0.0.1", open, kAgentSecurityOptions) ==
      "the workers' store listens on 10.0.0.1 without a token: anyone who reaches it can read and "
      "change the job's rendezvous; give every agent --rdzv-conf token_file=PATH (a mode-600 file "
      "with the job's secret) on a network you do not trust");
  CHECK(
      openStoreWarning("the rendezvous store", "0.0.0.0", "0.0.0.0:29400", open,
                       kDaemonSecurityOptions) ==
      "the rendezvous store listens on 0.0.0.0:29400 without a token: anyone who reaches it can "
      "read and change the job's rendezvous; give --token-file FILE (a mode-600 file with the "
      "job's secret; every agent takes the same file as --rdzv-conf token_file=PATH) on a network "
      "you do not trust");
}

TEST_CASE("server limits: the defaults pass, each limit out of range is one line naming it",
          "[security]") {
  const ServerOptions defaults;
  CHECK_FALSE(serverLimitsProblem(defaults));
  const ServerLimits good = ServerLimits::of(defaults);
  CHECK(good.maxConnections == 16384);
  CHECK(good.handshakeTimeoutSeconds == 10.0);

  struct Case {
    void (*change)(ServerLimits&);
    std::string says;
  };
  const Case which = GENERATE(
      Case{[](ServerLimits& l) { l.maxConnections = 0; }, "--max-connections 0 must be at least 1"},
      Case{[](ServerLimits& l) { l.maxConnections = -1; },
           "--max-connections -1 must be at least 1"},
      Case{[](ServerLimits& l) { l.maxKeyBytes = 0; }, "--max-key-bytes 0 must be at least 1"},
      Case{[](ServerLimits& l) { l.maxValueBytes = -1; },
           "--max-value-bytes -1 must be at least 1"},
      Case{[](ServerLimits& l) { l.maxKeysPerRequest = 0; },
           "--max-keys-per-request 0 must be at least 1"},
      Case{[](ServerLimits& l) { l.maxRequestBytes = 0; },
           "--max-request-bytes 0 must be at least 1"},
      Case{[](ServerLimits& l) { l.maxPendingHandshakes = -5; },
           "--max-pending-handshakes -5 must be at least 1"},
      Case{[](ServerLimits& l) { l.maxStoredBytes = 1000; },
           "--max-stored-bytes 1000 is less than --max-value-bytes 8388608: give at least 8388608"},
      Case{[](ServerLimits& l) { l.maxTotalPendingReplyBytes = 0; },
           "--max-pending-reply-bytes 0 is less than --max-value-bytes 8388608: give at least "
           "8388608"},
      Case{[](ServerLimits& l) { l.partialRequestTimeoutSeconds = -1; },
           "--partial-request-timeout must be a positive number of seconds"},
      Case{[](ServerLimits& l) { l.writeStallTimeoutSeconds = 0; },
           "--write-stall-timeout must be a positive number of seconds"},
      // Under a millisecond would be a timeout of 0.
      Case{[](ServerLimits& l) { l.handshakeTimeoutSeconds = 0.0001; },
           "--handshake-timeout must be a positive number of seconds (at least 0.001)"},
      Case{[](ServerLimits& l) { l.keepAliveIdleSeconds = -1; }, "--keepalive-idle must be >= 0"},
      Case{[](ServerLimits& l) { l.keepAliveIntervalSeconds = 0; }, "--keepalive-interval and"},
      Case{[](ServerLimits& l) { l.keepAliveProbes = 1LL + INT_MAX; }, "at most 2147483647"});
  ServerLimits limits = good;
  which.change(limits);
  const auto said = serverLimitsProblem(limits);
  REQUIRE(said);
  CHECK_THAT(*said, Catch::Contains(which.says));
  CHECK(oneLine(*said));
}

TEST_CASE("server limits: applyTo writes what of() read, and a value within range", "[security]") {
  ServerLimits limits = ServerLimits::of(ServerOptions{});
  limits.maxConnections = 7;
  limits.maxValueBytes = 1024;
  limits.maxStoredBytes = 1024;
  limits.partialRequestTimeoutSeconds = 1.5;
  limits.keepAliveIdleSeconds = 0;
  CHECK_FALSE(serverLimitsProblem(limits));
  ServerOptions options;
  limits.applyTo(options);
  CHECK(options.maxConnections == 7);
  CHECK(options.limits.maxValueBytes == 1024);
  CHECK(options.maxStoredBytes == 1024);
  CHECK(options.partialRequestTimeout == std::chrono::milliseconds(1500));
  CHECK(options.keepAliveIdle == std::chrono::seconds(0));
  CHECK_FALSE(serverLimitsProblem(options));
  // What the agent builds: a small connection cap, the rest defaults.
  ServerOptions agent;
  agent.maxConnections = 16;
  CHECK_FALSE(serverLimitsProblem(agent));
}
